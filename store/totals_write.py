"""Writing a finished run's derived rows: its totals (``run_totals``) and
the per-day TTFT rollup they feed (``ttft_days``), replaced together in the
caller's transaction."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, delete

from store import ttft_days
from store.run_totals import DERIVED, RUNS, as_rows, compute, heads


def write(conn: Connection, run_ids: Iterable[str], days: bool = True) -> None:
    """Write the totals of these runs (in the caller's transaction), replacing
    any; a run with a damaged cell gets none. ``days``: the per-day TTFT
    rollup follows (schema 9; not while migration 8 backfills, before it exists)."""
    ids = list(run_ids)
    if not ids:
        return
    before = ttft_days.sums(conn, RUNS.c.id.in_(ids))[0] if days else {}
    for table in DERIVED:
        conn.execute(delete(table).where(table.c.run_id.in_(ids)))
    totals, damaged = compute(conn, RUNS.c.id.in_(ids))
    kept = {k: t for k, t in totals.items() if k[0] not in damaged}
    for table, rows in zip(DERIVED, as_rows(kept, heads(conn, {k[0] for k in kept})), strict=True):
        if rows:
            conn.execute(table.insert(), rows)
    if days:
        ttft_days.moved(conn, before, ttft_days.sums(conn, RUNS.c.id.in_(ids))[0])
