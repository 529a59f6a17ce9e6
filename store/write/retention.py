"""``escrow gc``: delete whole runs older than a cut-off, and the blobs no
remaining run uses, in one write transaction. Each deleted run leaves a row
in ``deletions`` (its verdict and chain head), so its absence is accounted
for. A run that is the parent of a kept run is kept (its id is in the
child's chain genesis)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    Connection,
    LargeBinary,
    Table,
    Text,
    TypeDecorator,
    case,
    cast,
    delete,
    func,
    select,
)
from sqlalchemy import String as SAString

from orchestrator.contract import Frozen
from orchestrator.interop.records import IMPORT_MODE
from store.schema.tables import CHAINED, Deletion, ModelCall, Run, table_of
from store.write import blobs, totals_write

RUNS: Table = table_of(Run)
CALLS: Table = table_of(ModelCall)
DELETIONS: Table = table_of(Deletion)
# Children before parents, so foreign keys hold at every statement.
DELETE_ORDER = (
    "teacher_scores",  # refers to model_calls
    "escrow_transitions",
    "tool_executions",
    "candidates",
    "call_attempts",
    "model_responses",
    "events",
    "turns",
    "model_calls",
)


class GcRun(Frozen):
    """A run gc deletes (or, dry, would)."""

    run_id: str
    created_at: float
    """When it started (an imported run: its source's date)."""
    entered_at: float
    """When it entered this store: what its age is counted from."""
    mode: str
    verdict: str | None


class GcResult(Frozen):
    runs: tuple[GcRun, ...] = ()
    runs_deleted: int
    runs_kept_as_parents: int
    rows_deleted: int
    blobs_deleted: int
    bytes_freed: int
    """UTF-8 bytes of the text and the fixed-size cells removed, as SQL sees them."""


def entered_sql(dialect: str) -> Any:
    """When a run entered this store: an imported run's ``imported_at`` (its
    ``created_at`` is its source's date; one imported before that was
    recorded has only that), every other run's ``created_at``."""
    if dialect == "sqlite":
        at = func.json_extract(RUNS.c.config_json, "$.import.imported_at")
    else:
        at = cast(RUNS.c.config_json, JSON)["import"]["imported_at"].as_float()
    return case((RUNS.c.mode == IMPORT_MODE, func.coalesce(at, RUNS.c.created_at)), else_=RUNS.c.created_at)


def collect(
    conn: Connection, *, before: float, keep_verdicts: Iterable[str] = (), now: float | None = None
) -> GcResult:
    keep = sorted(set(keep_verdicts))
    entered = entered_sql(conn.dialect.name)
    stmt = select(RUNS.c.id, RUNS.c.created_at, RUNS.c.verdict, RUNS.c.chain_seq, RUNS.c.chain_head, RUNS.c.mode,
                  entered.label("entered_at")).where(entered < before)
    if keep:
        stmt = stmt.where((RUNS.c.verdict.is_(None)) | (RUNS.c.verdict.not_in(keep)))
    doomed = {r.id: r for r in conn.execute(stmt)}
    parents = {
        p
        for (p,) in conn.execute(
            select(RUNS.c.parent_run_id).where(
                RUNS.c.parent_run_id.is_not(None), RUNS.c.id.not_in(list(doomed) or [""])
            )
        )
    }
    kept_as_parents = len(doomed.keys() & parents)
    for run_id in parents:
        doomed.pop(run_id, None)
    ids = sorted(doomed)
    if not ids:
        return GcResult(
            runs_deleted=0, runs_kept_as_parents=kept_as_parents, rows_deleted=0, blobs_deleted=0, bytes_freed=0
        )
    candidates = _reached(conn, CALLS.c.run_id.in_(ids))
    freed = rows = 0
    tables = {m.__tablename__: table_of(m) for m in CHAINED}
    for start in range(0, len(ids), blobs.BATCH):
        chunk = ids[start : start + blobs.BATCH]
        for name in DELETE_ORDER:
            table = tables[name]
            freed += _size(conn, table, table.c.run_id.in_(chunk))
            rows += conn.execute(delete(table).where(table.c.run_id.in_(chunk))).rowcount or 0
        totals_write.forget(conn, chunk)  # not counted: derived data
        freed += _size(conn, RUNS, RUNS.c.id.in_(chunk))
        conn.execute(delete(RUNS).where(RUNS.c.id.in_(chunk)))
    stamp = time.time() if now is None else now
    conn.execute(
        DELETIONS.insert(),
        [
            {
                "run_id": r.id,
                "created_at": r.created_at,
                "deleted_at": stamp,
                "verdict": r.verdict,
                "chain_seq": r.chain_seq,
                "chain_head": r.chain_head,
                "reason": f"gc: entered the store before {before:.0f}" + (f", verdict not in {keep}" if keep else ""),
            }
            for r in doomed.values()
        ],
    )
    unused = sorted(candidates - _reached(conn, CALLS.c.request_refs.is_not(None)))
    for start in range(0, len(unused), blobs.BATCH):
        chunk = unused[start : start + blobs.BATCH]
        freed += _size(conn, blobs.BLOBS, blobs.BLOBS.c.sha256.in_(chunk))
        conn.execute(delete(blobs.BLOBS).where(blobs.BLOBS.c.sha256.in_(chunk)))
    gone = tuple(GcRun(run_id=r.id, created_at=r.created_at, entered_at=float(r.entered_at), mode=r.mode,
                       verdict=r.verdict) for r in sorted(doomed.values(), key=lambda r: (r.entered_at, r.id)))
    return GcResult(runs=gone, runs_deleted=len(ids), runs_kept_as_parents=kept_as_parents,
                    rows_deleted=rows + len(ids),
                    blobs_deleted=len(unused), bytes_freed=freed)


def recorded_repos(conn: Connection) -> set[str]:
    """Every starting workspace a run in the store records (its ``repo``)."""
    return set(conn.execute(select(RUNS.c.repo).distinct()).scalars())


def _reached(conn: Connection, where: ColumnElement[bool]) -> set[str]:
    """Every blob the selected requests reach (node bodies are read; message
    bodies are not needed to know their hashes)."""
    found: set[str] = set()
    refs = [r for (r,) in conn.execute(select(CALLS.c.request_refs).where(where)) if r]
    bodies = blobs.load_for(conn, [{"request_refs": r} for r in refs], messages=False)
    for r in refs:
        blobs.reached(r, bodies, found)
    return found


def _size(conn: Connection, table: Table, where: ColumnElement[bool]) -> int:
    """Bytes in the selected rows: text cells by their UTF-8 length, other
    non-NULL cells as 8."""
    sqlite = conn.dialect.name == "sqlite"
    parts: list[Any] = []
    for c in table.columns:
        if isinstance(c.type, (Text, SAString, TypeDecorator)):  # escaped text columns too
            parts.append(func.coalesce(func.length(cast(c, LargeBinary)) if sqlite else func.octet_length(c), 0))
        else:
            parts.append(case((c.is_(None), 0), else_=8))
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    return int(conn.execute(select(func.coalesce(func.sum(total), 0)).where(where)).scalar() or 0)
