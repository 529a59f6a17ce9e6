"""Writing a finished run's derived rows: its totals (``run_totals``) and
the per-day TTFT rollup they feed (``ttft_days``), replaced together in the
caller's transaction."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Connection, delete

from store import totals_figures, ttft_days
from store.run_totals import DERIVED, RUNS, compute, heads
from store.totals_figures import Key, Totals, canonical, digest, in_run, order


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


def as_rows(totals: Mapping[Key, Totals],
            head_of: Mapping[str, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(totals rows, TTFT rows) to insert."""
    rows, ttfts = [], []
    model_rows = Counter((run_id, own) for run_id, own, model, _ in totals if model is not None)
    for (run_id, own, model, engine), t in sorted(totals.items(), key=lambda kv: order(kv[0])):
        key = {"run_id": run_id, "own": own, "model": model, "engine": engine}
        figures = canonical([getattr(t, name) for name in totals_figures.FIGURES])
        tools = totals.get((run_id, own, None, None))
        hashed = in_run(figures, model, float(tools.tool_s) if tools else 0.0, model_rows[(run_id, own)])
        rows.append({**key, **dict(zip(totals_figures.FIGURES, figures, strict=True)),
                     "digest": digest(head_of[run_id], (run_id, own, model, engine), hashed)})
        ttfts += [{**key, "bucket_ms": b, "calls": n} for b, n in sorted(t.ttft.items())]
    return rows, ttfts
