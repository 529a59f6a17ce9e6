"""A run's turns for its page in ``escrow view``: the turn index, a slice of
turns without the requests' text (each request repeats the whole history),
the search over a run's stored text, and the requests' own messages, read
only when asked for. The runs page and the filters are ``store.read.browse``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import cache, partial
from typing import Any, Generic, NamedTuple, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    String,
    Table,
    inspect,
    literal,
    or_,
    select,
)
from sqlmodel import SQLModel

from orchestrator.contract import Frozen
from orchestrator.trajectory import (
    AttemptView,
    CallView,
    CandidateView,
    EventView,
    ResponseView,
    ToolExecutionView,
    Trajectory,
    TransitionView,
    TurnRecord,
    TurnView,
)
from store.read.reader import get_run
from store.read.request_texts import last_messages, request_texts
from store.schema.tables import (
    CallAttempt,
    CandidateRow,
    EventRow,
    ModelCall,
    ModelResponse,
    ToolExecution,
    TransitionRow,
    Turn,
    table_of,
)

V = TypeVar("V", bound=Frozen)
RESPONSES: Table = table_of(ModelResponse)
TURNS: Table = table_of(Turn)

CALLS: Table = table_of(ModelCall)


class TurnSlice(Frozen):
    """Some of a run's turns, read for its page without the requests' text:
    each request repeats the whole history (megabytes on a long run), and the
    page shows only the first request's own messages, what each turn appended
    (its committed row) and each request's last message (the volatile tail)."""

    trajectory: Trajectory
    """The turns asked for and the run-level events. ``request_json`` is
    read only for the run's first call; it is empty on every other call."""
    appended_before: str | None
    """The messages the turn before the first one asked for appended (JSON)."""
    last_messages: dict[str, str]
    """Each call's last request message (JSON), by call id."""
    appended: dict[int, str | None] | None = None
    """For a slice of chosen turns: what the turn before each appended to
    the history (JSON; ``[]`` when it never committed), None for the first turn."""


class TurnIndexEntry(Frozen):
    turn: int
    bad: bool
    """A call not COMPLETED, or the turn never committed."""


def turn_index(conn: Connection, run_id: str) -> list[TurnIndexEntry]:
    """Every turn number of a run with whether something went wrong in it,
    from the calls', responses' and turns' small columns."""
    committed = set(conn.execute(select(TURNS.c.turn).where(TURNS.c.run_id == run_id)).scalars())
    statuses: dict[int, set[str]] = defaultdict(set)
    answered = select(CALLS.c.turn, RESPONSES.c.status).select_from(
        CALLS.outerjoin(RESPONSES, RESPONSES.c.call_id == CALLS.c.id)
    )
    for turn, status in conn.execute(answered.where(CALLS.c.run_id == run_id, CALLS.c.turn.is_not(None))):
        statuses[turn].add(status or "NO RESPONSE")
    events = _table(EventRow)
    numbers = committed | set(statuses) | set(conn.execute(
        select(events.c.turn).where(events.c.run_id == run_id, events.c.turn.is_not(None)).distinct()).scalars())
    return [TurnIndexEntry(turn=n, bad=bool(statuses[n] - {"COMPLETED"}) or (n in statuses and n not in committed))
            for n in sorted(numbers)]


def _table(model: type) -> Table:
    return table_of(model)


@cache
def _attrs(model: type[SQLModel]) -> dict[str, str]:
    """Python attribute names of a table's columns, by column name."""
    return {column.name: attr for attr, column in inspect(model).columns.items()}


class ReadRow(NamedTuple, Generic[V]):
    """One row of a slice: its view, and the row's values by column name
    (what a view does not keep, such as the ``call_id`` its group is by)."""

    view: V
    columns: dict[str, Any]


def _no_parts(values: dict[str, Any]) -> dict[str, Any]:
    return {}


def _constructed(view_cls: type[V], model: type, result: Any,
                 extra: Callable[[dict[str, Any]], dict[str, Any]] = _no_parts) -> list[ReadRow[V]]:
    """Views of a result's rows, each with its row's values by column name.
    Plain tuples are read rather than SQLAlchemy's row mappings, which cost
    more than the views' validation on a long run's ~2,500 rows."""
    names = _attrs(model)
    keys = list(result.keys())
    pairs = [(i, names[k]) for i, k in enumerate(keys) if names.get(k) in view_cls.model_fields]
    out = []
    for row in result:
        values = {a: row[i] for i, a in pairs}
        out.append(ReadRow(view_cls.model_validate({**values, **extra(values)}), dict(zip(keys, row, strict=True))))
    return out


@dataclass(frozen=True)
class _SliceQuery:
    """The rows of one run's turns ``first``..``last`` (or ``only`` those),
    as ``turn_slice`` reads them table by table."""

    conn: Connection
    run_id: str
    first: int | None
    last: int | None
    only: Collection[int] | None
    detail: bool

    def rows(self, model: type, *columns: Any, loose: bool = False) -> Any:
        """The slice's rows of ``model``'s table (``loose``: run-level rows too)."""
        t = _table(model)
        stmt = select(*(columns or (t,))).where(t.c.run_id == self.run_id)
        bounded: ColumnElement[bool] = t.c.turn.is_not(None)
        if self.first is not None:
            bounded = bounded & (t.c.turn >= self.first)
        if self.last is not None:
            bounded = bounded & (t.c.turn <= self.last)
        if self.only is not None:
            bounded = bounded & t.c.turn.in_(sorted(self.only))
        stmt = stmt.where(bounded | t.c.turn.is_(None)) if loose else stmt.where(bounded)
        if not self.detail and model in (CallAttempt, TransitionRow, EventRow):
            stmt = stmt.where(literal(False))
        return self.conn.execute(stmt.order_by(t.c.seq))

    def views(self, view_cls: type[V], model: type, *columns: Any, loose: bool = False,
              extra: Callable[[dict[str, Any]], dict[str, Any]] = _no_parts) -> list[V]:
        return [read.view for read in _constructed(view_cls, model, self.rows(model, *columns, loose=loose), extra)]

    def grouped(self, view_cls: type[V], model: type, by: str) -> dict[str, list[V]]:
        """The slice's views of ``model``, in order, grouped by the column ``by``
        (a call's attempts by ``call_id``, a candidate's moves by ``candidate_id``)."""
        groups: dict[str, list[V]] = defaultdict(list)
        for read in _constructed(view_cls, model, self.rows(model)):
            groups[read.columns[by]].append(read.view)
        return groups


def _attempt_number(attempt: AttemptView) -> int:
    return attempt.number


def _call_parts(first_call: tuple[str, str] | None, responses: Mapping[str, ResponseView],
                attempts: Mapping[str, list[AttemptView]], values: dict[str, Any]) -> dict[str, Any]:
    """What a call's view gets besides its columns: the request text (only the
    run's first call's is read), its response and its HTTP attempts in order."""
    call_id = values["id"]
    return {
        "request_json": first_call[1] if first_call and call_id == first_call[0] else "",
        "response": responses.get(call_id),
        "attempts": tuple(sorted(attempts.get(call_id, ()), key=_attempt_number)),
    }


def _candidate_parts(moves: Mapping[str, list[TransitionView]], values: dict[str, Any]) -> dict[str, Any]:
    """A candidate's escrow transitions, in order."""
    return {"transitions": tuple(moves.get(values["id"], ()))}


def _first_request(conn: Connection, run_id: str) -> tuple[str, str] | None:
    """(call id, request text) of the run's first call, the only request whose text a page shows whole."""
    first_row = conn.execute(select(CALLS).where(CALLS.c.run_id == run_id, CALLS.c.attempt_of.is_(None))
                             .order_by(CALLS.c.seq).limit(1)).first()
    first_text = request_texts(conn, [dict(first_row._mapping)]) if first_row is not None else {}
    return next(iter(first_text.items()), None)


def _records(committed: Mapping[int, TurnView], **items: list[Any]) -> tuple[TurnRecord, ...]:
    """The turn records of every turn a committed row or an item names, the
    items (calls, candidates, tool executions, events) grouped by turn in order."""
    groups: dict[str, dict[int, list[Any]]] = {name: defaultdict(list) for name in items}
    for name, listed in items.items():
        for item in listed:
            if item.turn is not None:
                groups[name][item.turn].append(item)
    numbers = sorted(set(committed).union(*(g.keys() for g in groups.values())))
    return tuple(
        TurnRecord(turn=n, committed=committed.get(n), **{k: tuple(g.get(n, ())) for k, g in groups.items()})
        for n in numbers
    )


def turn_slice(conn: Connection, run_id: str, first: int | None = None, last: int | None = None, *,
               tails: bool = True, detail: bool = True, only: Collection[int] | None = None) -> TurnSlice:
    """Turns ``first``..``last`` (inclusive; unbounded when None) of a run;
    ``tails`` also reads each request's last message. Without ``detail``,
    the HTTP attempts, escrow transitions and events are left out (a
    comparison does not look at them; they are half of a run's rows).
    ``only`` reads just those turns (a search's), each with what the turn
    before it appended (``TurnSlice.appended``)."""
    run = get_run(conn, run_id)
    query = _SliceQuery(conn, run_id, first, last, only, detail)
    call_columns = [c for c in CALLS.c if c.name != "request_json"]
    if tails:
        last_rows = list(last_messages(conn, [dict(r._mapping) for r in query.rows(ModelCall)]).items())
    responses = {call_id: views[-1] for call_id, views in query.grouped(ResponseView, ModelResponse, "call_id").items()}
    call_parts = partial(_call_parts, _first_request(conn, run_id), responses,
                         query.grouped(AttemptView, CallAttempt, "call_id"))
    calls = query.views(CallView, ModelCall, *call_columns, extra=call_parts)
    candidate_parts = partial(_candidate_parts, query.grouped(TransitionView, TransitionRow, "candidate_id"))
    candidates = query.views(CandidateView, CandidateRow, extra=candidate_parts)
    executions = query.views(ToolExecutionView, ToolExecution)
    events = query.views(EventView, EventRow, loose=True)
    committed = {v.turn: v for v in query.views(TurnView, Turn)}
    records = _records(committed, calls=calls, candidates=candidates, tool_executions=executions, events=events)
    before = None
    if first is not None:
        before = conn.execute(select(TURNS.c.messages_json).where(TURNS.c.run_id == run_id, TURNS.c.turn < first)
                              .order_by(TURNS.c.turn.desc()).limit(1)).scalar()
    return TurnSlice(
        appended=_appended_before_each(conn, run_id, only) if only is not None else None,
        trajectory=Trajectory(run=run, turns=records, run_events=tuple(e for e in events if e.turn is None)),
        appended_before=before, last_messages={i: m for i, m in last_rows if m is not None} if tails else {},
    )


def _appended_before_each(conn: Connection, run_id: str, only: Collection[int]) -> dict[int, str | None]:
    numbers = [e.turn for e in turn_index(conn, run_id)]
    previous = {n: (numbers[i - 1] if i else None) for i, n in enumerate(numbers)}
    wanted = {previous.get(n) for n in only} - {None}
    committed = dict(conn.execute(select(TURNS.c.turn, TURNS.c.messages_json).where(
        TURNS.c.run_id == run_id, TURNS.c.turn.in_(sorted(wanted)))).all()) if wanted else {}
    return {n: None if previous.get(n) is None else committed.get(previous[n], "[]") for n in only}


SEARCHED = (ModelResponse, CandidateRow, TransitionRow, ToolExecution, EventRow)
WORD = re.compile(r"[a-hjl-z0-9]+")
"""Characters a search can look for in the stored text as they are shown:
ASCII letters and digits are never escaped in JSON, and no other character
lower-cases to one of them except to 'i' (U+0130) and 'k' (U+212A), left out."""


def _textual(column: Any) -> bool:
    """A text column (sqlmodel's AutoString decorates a String)."""
    return isinstance(getattr(column.type, "impl", column.type), String)


def search_turns(conn: Connection, run_id: str, text: str) -> list[int] | None:
    """The turns whose stored rows may contain ``text`` (case-insensitive):
    every turn whose page text contains it is among them, found with SQL over
    the rows' text columns by the longest run of plain letters and digits of
    the text. None when the text has no such run (then every turn is a
    candidate). The caller checks the candidates against the shown text."""
    words = WORD.findall(text.lower())
    if not words:
        return None
    pattern = f"%{max(words, key=len)}%"
    found: set[int] = set()
    for model in SEARCHED:
        t = _table(model)
        texts = [c.ilike(pattern) for c in t.c if _textual(c) and c.name not in ("id", "run_id", "chain_hash")]
        found.update(conn.execute(select(t.c.turn).where(t.c.run_id == run_id, t.c.turn.is_not(None), or_(*texts))
                                  .distinct()).scalars())
    numbers = [e.turn for e in turn_index(conn, run_id)]
    following = {n: numbers[i + 1] for i, n in enumerate(numbers[:-1])}
    # A turn's committed messages are shown as the next turn's new messages.
    for turn in conn.execute(
        select(TURNS.c.turn).where(TURNS.c.run_id == run_id, TURNS.c.messages_json.ilike(pattern))
    ).scalars():
        if turn in following:
            found.add(following[turn])
    calls = [dict(r._mapping) for r in conn.execute(
        select(CALLS.c.id, CALLS.c.turn, CALLS.c.request_json, CALLS.c.request_refs, RESPONSES.c.id.label("answered"))
        .select_from(CALLS.outerjoin(RESPONSES, RESPONSES.c.call_id == CALLS.c.id))
        .where(CALLS.c.run_id == run_id, CALLS.c.turn.is_not(None)))]
    # The opening request, and calls without an answer ("no response ..."), are always checked.
    found.update(c["turn"] for c in calls if c["answered"] is None)
    if calls:
        found.add(min(c["turn"] for c in calls))
    turn_of = {c["id"]: c["turn"] for c in calls}
    needle = pattern.strip("%")
    found.update(turn_of[i] for i, tail in last_messages(conn, calls).items() if needle in tail.lower())
    return sorted(found)
