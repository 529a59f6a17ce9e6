"""Queries behind the Store's read methods. Every query is driven by an index:
runs by ``created_at`` (and the filter columns), chained rows by
``(run_id, seq)``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import Connection, Table, case, func, inspect, select
from sqlmodel import SQLModel

from orchestrator.source_figures import IMPORT_EVENT, add_run_level, counted_run_level
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
from store.check.cells import check_numbers, check_row
from store.errors import RunNotFound
from store.read import liveness
from store.schema.tables import (
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
from store.write import blobs, token_ids

V = TypeVar("V", bound=BaseModel)


@cache
def _attr_of_column(model: type[SQLModel]) -> dict[str, str]:
    return {column.name: attr for attr, column in inspect(model).columns.items()}


def view(view_cls: type[V], model: type, row: Mapping[Any, Any], **extra: Any) -> V:
    check_row(_table(model), row)
    names, fields = _attr_of_column(model), view_cls.model_fields
    values = {names[k]: v for k, v in row.items() if names.get(k) in fields}
    return view_cls(**values, **extra)


def _table(model: type) -> Table:
    return table_of(model)


def _rows(conn: Connection, model: type, run_id: str) -> list[Mapping[Any, Any]]:
    t = _table(model)
    return list(conn.execute(select(t).where(t.c.run_id == run_id).order_by(t.c.seq)).mappings())


def matching_run_ids(conn: Connection, ref: str, *, limit: int) -> list[str]:
    """The run whose id is ``ref``, else up to ``limit`` runs whose id starts with it, in id order."""
    runs = _table(Run)
    if conn.execute(select(runs.c.id).where(runs.c.id == ref)).first():
        return [ref]
    if not ref or any(c in ref for c in "%_\\"):
        return []
    return [str(run_id) for run_id in conn.execute(
        select(runs.c.id).where(runs.c.id.like(f"{ref}%")).order_by(runs.c.id).limit(limit)).scalars()]


def resolve_run_id(conn: Connection, ref: str) -> str:
    """A full run id, from the id itself or a unique prefix of it."""
    found = matching_run_ids(conn, ref, limit=6)
    if found == [ref]:
        return ref
    if not ref or any(c in ref for c in "%_\\"):
        raise RunNotFound(f"no run {ref!r}", ref=ref)
    if not found:
        raise RunNotFound(f"no run matches {ref!r}", ref=ref)
    if len(found) > 1:  # named, so the user can pick one
        named = ", ".join(run_id[:12] for run_id in found[:5]) + (" and more" if len(found) > 5 else "")
        raise RunNotFound(f"run prefix {ref!r} is ambiguous: it matches {named}; give more characters", ref=ref)
    return found[0]


def get_run(conn: Connection, run_id: str, *, now: float | None = None) -> RunView:
    runs = _table(Run)
    row = conn.execute(select(runs).where(runs.c.id == run_id)).mappings().first()
    if row is None:
        raise RunNotFound(f"no run {run_id!r}", ref=run_id)
    return liveness.marked([view(RunView, Run, row)], conn, liveness.now_or(now))[0]


def list_runs(
    conn: Connection, *, status: str | None = None, verdict: str | None = None, model: str | None = None,
    since: float | None = None, until: float | None = None, limit: int = 50, now: float | None = None,
) -> list[RunSummary]:
    """Newest first; totals are aggregated for the returned page only."""
    runs = _table(Run)
    at = liveness.now_or(now)
    stmt = select(runs).order_by(runs.c.created_at.desc(), runs.c.id.desc()).limit(limit)
    if status is not None:
        stmt = stmt.where(liveness.status_clause(status, at))
    for column, wanted in ((runs.c.verdict, verdict), (runs.c["gen_ai.request.model"], model)):
        if wanted is not None:
            stmt = stmt.where(column == wanted)
    if since is not None:
        stmt = stmt.where(runs.c.created_at >= since)
    if until is not None:
        stmt = stmt.where(runs.c.created_at < until)
    page = liveness.marked([view(RunView, Run, row) for row in conn.execute(stmt).mappings()], conn, at)
    totals = run_totals(conn, [r.id for r in page])
    return [RunSummary(run=r, totals=totals.get(r.id, RunTotals())) for r in page]


def run_totals(conn: Connection, run_ids: list[str]) -> dict[str, RunTotals]:
    if not run_ids:
        return {}
    calls, responses, turns = _table(ModelCall), _table(ModelResponse), _table(Turn)
    check_numbers(conn, responses, responses.c.run_id.in_(run_ids))
    counts: dict[str, dict[str, Any]] = defaultdict(dict)
    for run_id, n in conn.execute(
        select(calls.c.run_id, func.count()).where(calls.c.run_id.in_(run_ids)).group_by(calls.c.run_id)
    ):
        counts[run_id]["calls"] = n
    for run_id, n in conn.execute(
        select(turns.c.run_id, func.count()).where(turns.c.run_id.in_(run_ids)).group_by(turns.c.run_id)
    ):
        counts[run_id]["turns"] = n
    figures = ("input_tokens", "cached_input_tokens", "output_tokens")
    sums = select(
        responses.c.run_id,
        func.sum(responses.c["gen_ai.usage.input_tokens"]),
        func.sum(responses.c["gen_ai.usage.cache_read.input_tokens"]),
        func.sum(responses.c["gen_ai.usage.output_tokens"]),
        func.sum(responses.c.cost_usd),
        func.count(),
        *(func.sum(case((responses.c[f"{name}_source"] == "absent", 1), else_=0)) for name in figures),
    ).where(responses.c.run_id.in_(run_ids)).group_by(responses.c.run_id)
    for run_id, tin, tcached, tout, cost, n, *unreported in conn.execute(sums):
        counts[run_id].update(
            input_tokens=tin or 0, cached_input_tokens=tcached or 0, output_tokens=tout or 0, cost_usd=cost,
            responses=n, unreported={k: int(v or 0) for k, v in zip(figures, unreported, strict=True) if v},
        )
    events = _table(EventRow)
    for run_id, data_json in conn.execute(select(events.c.run_id, events.c.data_json).where(
            events.c.run_id.in_(run_ids), events.c.kind == IMPORT_EVENT, events.c.turn.is_(None))):
        counted = counted_run_level(data_json)
        if counted is not None:  # an imported run's run-level figures no call gives
            add_run_level(counts[run_id], counted)
    return {run_id: RunTotals(**values) for run_id, values in counts.items()}


def turns(conn: Connection, run_id: str) -> list[TurnView]:
    return [view(TurnView, Turn, row) for row in _rows(conn, Turn, run_id)]


def calls(conn: Connection, run_id: str) -> list[CallView]:
    # Prompt ids are stored as what each prompt adds (store/write/token_ids.py): put back whole, in chain order.
    # Each row's cells are checked before the ids are put back in chain
    # order: a wrong-typed seq or envelope is the damaged-store error.
    rows = list(_rows(conn, ModelResponse, run_id))
    for row in rows:
        check_row(_table(ModelResponse), row)
    responses = {row["call_id"]: view(ResponseView, ModelResponse, row) for row in token_ids.expand_rows(rows)}
    attempts: dict[str, list[AttemptView]] = defaultdict(list)
    for row in _rows(conn, CallAttempt, run_id):
        attempts[row["call_id"]].append(view(AttemptView, CallAttempt, row))
    stored = _rows(conn, ModelCall, run_id)
    for row in stored:  # the cells as stored, before the request is reassembled from them
        check_row(_table(ModelCall), row)
    return [
        view(
            CallView,
            ModelCall,
            row,
            response=responses.get(row["id"]),
            attempts=tuple(sorted(attempts[row["id"]], key=lambda a: a.number)),
        )
        for row in blobs.expand(conn, stored)
    ]


def candidates(conn: Connection, run_id: str) -> list[CandidateView]:
    moves: dict[str, list[TransitionView]] = defaultdict(list)
    for row in _rows(conn, TransitionRow, run_id):
        moves[row["candidate_id"]].append(view(TransitionView, TransitionRow, row))
    return [
        view(CandidateView, CandidateRow, row, transitions=tuple(moves[row["id"]]))
        for row in _rows(conn, CandidateRow, run_id)
    ]


def tool_executions(conn: Connection, run_id: str) -> list[ToolExecutionView]:
    return [view(ToolExecutionView, ToolExecution, row) for row in _rows(conn, ToolExecution, run_id)]


def events(conn: Connection, run_id: str, kind: str | None = None) -> list[EventView]:
    found = [view(EventView, EventRow, row) for row in _rows(conn, EventRow, run_id)]
    return [e for e in found if kind is None or e.kind == kind]


def trajectory(conn: Connection, run_id: str) -> Trajectory:
    """The whole run grouped by turn number, in recording order."""
    run = get_run(conn, run_id)
    committed = {t.turn: t for t in turns(conn, run_id)}
    groups: dict[str, dict[int, list[Any]]] = {
        k: defaultdict(list) for k in ("calls", "candidates", "tool_executions", "events")
    }
    loose: list[EventView] = []
    sources: Iterable[tuple[str, list[Any]]] = (
        ("calls", calls(conn, run_id)), ("candidates", candidates(conn, run_id)),
        ("tool_executions", tool_executions(conn, run_id)), ("events", events(conn, run_id)),
    )
    for name, items in sources:
        for item in items:
            if item.turn is None:
                loose.append(item)
            else:
                groups[name][item.turn].append(item)
    numbers = sorted(set(committed).union(*(g.keys() for g in groups.values())))
    records = tuple(
        TurnRecord(turn=n, committed=committed.get(n), **{k: tuple(g.get(n, ())) for k, g in groups.items()})
        for n in numbers
    )
    return Trajectory(run=run, turns=records, run_events=tuple(loose))
