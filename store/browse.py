"""Paginated reads for browsing a store (``escrow view``): a filtered, sorted
page of runs with their totals, the values the filters offer, and a run's
chain positions. One SQL statement per page; nothing loads every run.

``has_batches`` says whether a ``batches`` table exists (stores from before
schema 5 have none), so the runs page offers the batch filter only then.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable, Collection
from functools import cache
from typing import Any, Literal, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    MetaData,
    Select,
    String,
    Table,
    func,
    inspect,
    literal,
    or_,
    select,
    union_all,
)
from sqlmodel import SQLModel

from orchestrator.contract import Frozen
from orchestrator.trajectory import (
    AttemptView,
    CallView,
    CandidateView,
    EventView,
    ResponseView,
    RunSummary,
    RunTotals,
    RunView,
    ToolExecutionView,
    Trajectory,
    TransitionView,
    TurnRecord,
    TurnView,
)
from store import blobs
from store.batch_tables import BatchAttemptRow
from store.reader import get_run, run_totals, view
from store.tables import (
    CHAINED,
    CallAttempt,
    CandidateRow,
    EventRow,
    ModelCall,
    ModelResponse,
    Run,
    ToolExecution,
    TransitionRow,
    Turn,
    table_of,
)

V = TypeVar("V", bound=Frozen)
SortKey = Literal["started", "cost", "turns", "tokens", "verdict", "model"]
SORT_KEYS: tuple[str, ...] = ("started", "cost", "turns", "tokens", "verdict", "model")
BATCH_TABLE = "batches"

RUNS: Table = table_of(Run)
RESPONSES: Table = table_of(ModelResponse)
TURNS: Table = table_of(Turn)


class RunFilter(Frozen):
    """What the runs page asks for. Unset fields do not filter."""

    verdict: str | None = None
    model: str | None = None
    batch: str | None = None
    text: str | None = None
    since: float | None = None
    until: float | None = None
    min_cost: float | None = None
    max_cost: float | None = None
    min_turns: int | None = None
    max_turns: int | None = None
    sort: SortKey = "started"
    descending: bool = True
    page: int = 1
    per_page: int = 50

    @property
    def needs_totals(self) -> bool:
        """Whether the query must aggregate every matching run (not only the page)."""
        return self.sort in ("cost", "turns", "tokens") or any(
            v is not None for v in (self.min_cost, self.max_cost, self.min_turns, self.max_turns))


class RunPage(Frozen):
    runs: tuple[RunSummary, ...]
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


class Facets(Frozen):
    """The values the runs page offers in its drop-downs."""

    verdicts: tuple[str, ...]
    models: tuple[str, ...]
    batches: tuple[str, ...] | None
    """None while the store has no batch table."""


class ChainPosition(Frozen):
    seq: int
    table: str
    id: str
    turn: int | None
    chain_hash: str


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def has_batches(conn: Connection) -> bool:
    return inspect(conn).has_table(BATCH_TABLE)


def _per_run_totals() -> dict[str, Any]:
    """Correlated subqueries, one index search per run: tokens and turns are
    read off covering indexes, cost from the responses' rows."""
    tokens = RESPONSES.c["gen_ai.usage.input_tokens"] + RESPONSES.c["gen_ai.usage.output_tokens"]
    return {
        "cost": select(func.coalesce(func.sum(RESPONSES.c.cost_usd), 0.0))
        .where(RESPONSES.c.run_id == RUNS.c.id)
        .scalar_subquery(),
        "tokens": select(func.coalesce(func.sum(tokens), 0)).where(RESPONSES.c.run_id == RUNS.c.id).scalar_subquery(),
        "turns": select(func.count()).where(TURNS.c.run_id == RUNS.c.id).scalar_subquery(),
    }


def _filtered(stmt: Select[Any], f: RunFilter) -> Select[Any]:
    for column, wanted in ((RUNS.c.verdict, f.verdict), (RUNS.c["gen_ai.request.model"], f.model)):
        if wanted:
            stmt = stmt.where(column == wanted)
    if f.text:
        stmt = stmt.where(RUNS.c.task.like(f"%{_escape_like(f.text)}%", escape="\\"))
    if f.since is not None:
        stmt = stmt.where(RUNS.c.created_at >= f.since)
    if f.until is not None:
        stmt = stmt.where(RUNS.c.created_at < f.until)
    return stmt


def page_runs(conn: Connection, f: RunFilter) -> RunPage:
    """One page of runs matching ``f``, with the total count. Cost and turn
    bounds and sorts are computed per matching run in the same statement;
    otherwise only the page's runs are aggregated."""
    ids = _filtered(select(RUNS.c.id), f)
    keyed = _per_run_totals() if f.needs_totals else {}
    bounds: tuple[tuple[Any, float | None, float | None], ...] = (
        (keyed.get("cost"), f.min_cost, f.max_cost),
        (keyed.get("turns"), f.min_turns, f.max_turns),
    )
    for column, low, high in bounds:
        if low is not None:
            ids = ids.where(column >= low)
        if high is not None:
            ids = ids.where(column <= high)
    if f.batch:
        attempts = table_of(BatchAttemptRow)
        ids = ids.where(RUNS.c.id.in_(select(attempts.c.run_id).where(attempts.c.batch_id == f.batch)))
    plain = {"verdict": RUNS.c.verdict, "model": RUNS.c["gen_ai.request.model"]}
    sort_column = keyed[f.sort] if f.sort in keyed else plain.get(f.sort, RUNS.c.created_at)
    order = [sort_column.desc() if f.descending else sort_column.asc()]
    if sort_column is not RUNS.c.created_at:
        order.append(RUNS.c.created_at.desc())
    order.append(RUNS.c.id.desc() if f.descending else RUNS.c.id.asc())
    total = int(conn.execute(select(func.count()).select_from(ids.subquery())).scalar() or 0)
    page = max(1, f.page)
    wanted = list(conn.execute(ids.order_by(*order).limit(f.per_page).offset((page - 1) * f.per_page)).scalars())
    return RunPage(runs=tuple(summaries(conn, wanted)), total=total, page=page, per_page=f.per_page)


def summaries(conn: Connection, ids: list[str]) -> list[RunSummary]:
    if not ids:
        return []
    rows = {
        row["id"]: view(RunView, Run, row) for row in conn.execute(select(RUNS).where(RUNS.c.id.in_(ids))).mappings()
    }
    totals = run_totals(conn, ids)
    return [RunSummary(run=rows[i], totals=totals.get(i, RunTotals())) for i in ids if i in rows]


def facets(conn: Connection) -> Facets:
    """Distinct verdicts and models, read off their indexes."""
    verdicts = conn.execute(
        select(RUNS.c.verdict).where(RUNS.c.verdict.is_not(None)).distinct().order_by(RUNS.c.verdict)
    ).scalars()
    model = RUNS.c["gen_ai.request.model"]
    models = conn.execute(select(model).distinct().order_by(model)).scalars()
    batches: tuple[str, ...] | None = None
    if has_batches(conn):
        batches = tuple(
            str(b) for b in conn.execute(select(Table(BATCH_TABLE, MetaData(), autoload_with=conn).c.id)).scalars()
        )
    return Facets(verdicts=tuple(verdicts), models=tuple(models), batches=batches)


def chain_positions(conn: Connection, run_id: str) -> list[ChainPosition]:
    """Every chained row of a run, in chain order: table, id, turn and hash."""
    parts = []
    for model in CHAINED:
        t: Table = table_of(model)
        parts.append(
            select(t.c.seq, literal(t.name).label("tbl"), t.c.id, t.c.turn, t.c.chain_hash).where(t.c.run_id == run_id)
        )
    stmt = union_all(*parts).order_by("seq")
    return [
        ChainPosition(seq=r.seq, table=r.tbl, id=r.id, turn=r.turn, chain_hash=r.chain_hash) for r in conn.execute(stmt)
    ]



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


def _constructed(view_cls: type[V], model: type, result: Any,
                 extra: Callable[[dict[str, Any]], dict[str, Any]] = lambda _: {}) -> list[tuple[V, tuple[Any, ...]]]:
    """Views of a result's rows, each with its raw row. Plain tuples are
    read rather than SQLAlchemy's row mappings, which cost more than the
    views' validation on a long run's ~2,500 rows."""
    names = _attrs(model)
    keys = list(result.keys())
    pairs = [(i, names[k]) for i, k in enumerate(keys) if names.get(k) in view_cls.model_fields]
    out = []
    for row in result:
        values = {a: row[i] for i, a in pairs}
        out.append((view_cls.model_validate({**values, **extra(values)}), tuple(row)))
    return out


def turn_slice(conn: Connection, run_id: str, first: int | None = None, last: int | None = None, *,
               tails: bool = True, detail: bool = True, only: Collection[int] | None = None) -> TurnSlice:
    """Turns ``first``..``last`` (inclusive; unbounded when None) of a run;
    ``tails`` also reads each request's last message. Without ``detail``,
    the HTTP attempts, escrow transitions and events are left out (a
    comparison does not look at them; they are half of a run's rows).
    ``only`` reads just those turns (a search's), each with what the turn
    before it appended (``TurnSlice.appended``)."""
    run = get_run(conn, run_id)

    def rows(model: type, *columns: Any, loose: bool = False) -> Any:
        t = _table(model)
        stmt = select(*(columns or (t,))).where(t.c.run_id == run_id)
        bounded: ColumnElement[bool] = t.c.turn.is_not(None)
        if first is not None:
            bounded = bounded & (t.c.turn >= first)
        if last is not None:
            bounded = bounded & (t.c.turn <= last)
        if only is not None:
            bounded = bounded & t.c.turn.in_(sorted(only))
        stmt = stmt.where(bounded | t.c.turn.is_(None)) if loose else stmt.where(bounded)
        if not detail and model in (CallAttempt, TransitionRow, EventRow):
            stmt = stmt.where(literal(False))
        return conn.execute(stmt.order_by(t.c.seq))

    def views(view_cls: type[V], model: type, *columns: Any, loose: bool = False,
              extra: Callable[[dict[str, Any]], dict[str, Any]] = lambda _: {}) -> list[tuple[V, tuple[Any, ...]]]:
        return _constructed(view_cls, model, rows(model, *columns, loose=loose), extra)

    def by(model: type, name: str) -> int:
        return [c.name for c in _table(model).c].index(name)

    call_columns = [c for c in CALLS.c if c.name != "request_json"]
    if tails:
        last_rows = list(_last_messages(conn, [dict(r._mapping) for r in rows(ModelCall)]).items())
    first_row = conn.execute(select(CALLS).where(CALLS.c.run_id == run_id, CALLS.c.attempt_of.is_(None))
                             .order_by(CALLS.c.seq).limit(1)).first()
    first_text = _request_texts(conn, [dict(first_row._mapping)]) if first_row is not None else {}
    first_call = next(((i, t) for i, t in first_text.items()), None)
    response_call = by(ModelResponse, "call_id")
    responses = {raw[response_call]: v for v, raw in views(ResponseView, ModelResponse)}
    attempts: dict[str, list[AttemptView]] = defaultdict(list)
    attempt_call = by(CallAttempt, "call_id")
    for attempt, raw in views(AttemptView, CallAttempt):
        attempts[raw[attempt_call]].append(attempt)

    def call_parts(values: dict[str, Any]) -> dict[str, Any]:
        i = values["id"]
        return {
            "request_json": first_call[1] if first_call and i == first_call[0] else "",
            "response": responses.get(i),
            "attempts": tuple(sorted(attempts[i], key=lambda a: a.number)),
        }

    calls = [c for c, _ in views(CallView, ModelCall, *call_columns, extra=call_parts)]
    moves: dict[str, list[TransitionView]] = defaultdict(list)
    move_candidate = by(TransitionRow, "candidate_id")
    for move, raw in views(TransitionView, TransitionRow):
        moves[raw[move_candidate]].append(move)
    candidates = [
        c for c, _ in views(CandidateView, CandidateRow, extra=lambda v: {"transitions": tuple(moves[v["id"]])})
    ]
    executions = [v for v, _ in views(ToolExecutionView, ToolExecution)]
    events = [v for v, _ in views(EventView, EventRow, loose=True)]
    committed = {v.turn: v for v, _ in views(TurnView, Turn)}
    groups: dict[str, dict[int, list[Any]]] = {
        k: defaultdict(list) for k in ("calls", "candidates", "tool_executions", "events")
    }
    for name, items in (
        ("calls", calls),
        ("candidates", candidates),
        ("tool_executions", executions),
        ("events", events),
    ):
        for item in items:
            if item.turn is not None:
                groups[name][item.turn].append(item)
    numbers = sorted(set(committed).union(*(g.keys() for g in groups.values())))
    records = tuple(
        TurnRecord(turn=n, committed=committed.get(n), **{k: tuple(g.get(n, ())) for k, g in groups.items()})
        for n in numbers
    )
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
    found.update(turn_of[i] for i, tail in _last_messages(conn, calls).items() if needle in tail.lower())
    return sorted(found)


def _last_messages(conn: Connection, call_rows: list[dict[str, Any]]) -> dict[str, str]:
    """Each request's last message (JSON), by call id. A request stored by
    reference (store.blobs) is not reassembled: its message-list nodes lead
    to its last message's blob, the only one read; reassembling every
    request would re-encode the whole history once per turn."""
    out: dict[str, str] = {}
    referenced = [r for r in call_rows if r.get("request_refs")]
    bodies: dict[str, str] = {}
    # Each request names its own node, which usually holds its last message;
    # parents are read only for nodes that added none (not the whole chain).
    pending = {r["id"]: blobs.refs_of(r["request_refs"]).get(blobs.MESSAGES) for r in referenced}
    wanted: dict[str, str] = {}
    while pending:
        blobs.fetch(conn, [n for n in pending.values() if n], bodies)
        step: dict[str, str | None] = {}
        for call_id, node in pending.items():
            found = _last_hash(node, bodies)
            if isinstance(found, str):
                wanted[call_id] = found
            elif isinstance(found, tuple) and found[0] not in bodies:
                step[call_id] = found[0]
        pending = step
    blobs.fetch(conn, wanted.values(), bodies)
    for call_id, sha in wanted.items():
        try:
            out[call_id] = json.dumps(json.loads(bodies[sha]))
        except (KeyError, ValueError):  # a missing or damaged blob: no tail (verify names it)
            continue
    for row in call_rows:
        if not row.get("request_refs") and row.get("request_json"):
            try:
                out[row["id"]] = json.dumps(json.loads(row["request_json"])["messages"][-1])
            except (ValueError, KeyError, IndexError, TypeError):  # not a request (an edited row): no tail
                continue
    return out


def _last_hash(node: str | None, bodies: dict[str, str]) -> str | tuple[str] | None:
    """The hash of the last message of a message-list node's list; (parent,)
    when the walk needs a node not read yet; None when there is none."""
    seen: set[str] = set()
    while node is not None and node not in seen:
        seen.add(node)
        if node not in bodies:
            return (node,)
        try:
            entry = json.loads(bodies[node])
            hashes, parent = entry[blobs.MESSAGES], entry["parent"]
        except (KeyError, ValueError, TypeError):
            return None
        if hashes:
            return hashes[-1] if isinstance(hashes[-1], str) else None
        node = parent if isinstance(parent, str) else None
    return None


def request_outlines(conn: Connection, pairs: list[tuple[str, str]]) -> dict[str, str]:
    """For pairs of calls whose requests differ, each request as JSON with
    only what locates their first difference spelled out: the request's own
    fields, its tools (by hash, unless the two differ), its messages by hash
    except the first one where the two differ. Compared field by field, two
    outlines differ first where the whole requests do, without reading or
    re-encoding either history. A request stored whole is returned whole."""
    ids = sorted({i for pair in pairs for i in pair})
    rows = {r["id"]: dict(r) for r in conn.execute(select(CALLS).where(CALLS.c.id.in_(ids))).mappings()} if ids else {}
    whole = [r for r in rows.values() if not r.get("request_refs")]
    out = _request_texts(conn, whole) if whole else {}
    bodies = blobs.load_for(conn, [r for r in rows.values() if r.get("request_refs")], messages=False)
    lists: dict[str, list[str]] = {}

    def message_hashes(node: str) -> list[str]:
        """A node's message hashes, each node's list made once from its
        parent's (blobs.message_hashes walks every request's whole chain)."""
        chain = []
        while node not in lists:
            chain.append(node)
            entry = json.loads(bodies[node])
            if entry["parent"] is None:
                lists[node] = list(entry[blobs.MESSAGES])
                chain.pop()
                break
            node = entry["parent"]
            if len(chain) > len(bodies):
                raise ValueError("a message-list node is its own ancestor")
        for current in reversed(chain):
            entry = json.loads(bodies[current])
            lists[current] = lists[entry["parent"]] + list(entry[blobs.MESSAGES])
        return lists[chain[0]] if chain else lists[node]

    skeletons: dict[str, tuple[dict[str, Any], str | None, list[str]]] = {}
    for call_id, row in rows.items():
        if call_id in out:
            continue
        try:
            refs = blobs.refs_of(row["request_refs"])
            hashes = message_hashes(refs[blobs.MESSAGES]) if blobs.MESSAGES in refs else []
            skeletons[call_id] = (json.loads(row["request_body"]), refs.get(blobs.TOOLS), hashes)
        except (KeyError, ValueError, TypeError):  # damaged: compared as whole text (verify names the damage)
            out.update(_request_texts(conn, [row]))
    # Messages before the first differing one are equal on both sides (the
    # same placeholder keeps their positions); those after it cannot come
    # first in the comparison and are left out.
    outlines: dict[str, tuple[dict[str, Any], str | None, list[str], int]] = {}
    for a, b in pairs:
        if a not in skeletons or b not in skeletons:
            continue
        (body_a, tools_a, msgs_a), (body_b, tools_b, msgs_b) = skeletons[a], skeletons[b]
        first = next(
            (i for i, (x, y) in enumerate(zip(msgs_a, msgs_b, strict=False)) if x != y), min(len(msgs_a), len(msgs_b))
        )
        for call_id, body, tools, msgs in ((a, body_a, tools_a, msgs_a), (b, body_b, tools_b, msgs_b)):
            outlines[call_id] = (body, tools if tools_a != tools_b else None, msgs[first:first + 1], first)
            if tools is not None and tools_a == tools_b:
                outlines[call_id] = (body, "=", msgs[first:first + 1], first)
    blobs.fetch(
        conn, [s for _, tools, spelled, _ in outlines.values() for s in (*spelled, tools) if s and s != "="], bodies
    )
    for call_id, (body, tools, spelled, first) in outlines.items():
        outline = dict(body)
        if tools is not None:
            outline[blobs.TOOLS] = json.loads(bodies[tools]) if tools in bodies else tools
        outline[blobs.MESSAGES] = ["="] * first + [json.loads(bodies[h]) if h in bodies else h for h in spelled]
        out[call_id] = json.dumps(outline)
    return out


def requests(conn: Connection, call_ids: list[str]) -> dict[str, str]:
    """The recorded request text of the given calls, by call id."""
    if not call_ids:
        return {}
    return _request_texts(conn, [dict(r._mapping) for r in conn.execute(select(CALLS).where(CALLS.c.id.in_(call_ids)))])


def _request_texts(conn: Connection, call_rows: list[dict[str, Any]]) -> dict[str, str]:
    """Request text by call id, reassembled from its blobs where stored by reference."""
    return {row["id"]: row["request_json"] for row in blobs.expand(conn, call_rows)}
