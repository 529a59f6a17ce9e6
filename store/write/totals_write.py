"""Every write of the derived rollups: a finished run's totals
(``run_totals``) and the per-day TTFT rollup they feed (``ttft_days``),
replaced together in the caller's transaction, and taken out together when
``gc`` deletes the run. Migrations 8 to 12 backfill through ``write``;
migration 9 builds the day rollup whole (``store.schema.migrations``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Connection, and_, delete, func, select, update

from store.errors import StoreDamaged
from store.read import ttft_days
from store.read.run_totals import DERIVED, RUNS, TOTALS, compute, heads, stored
from store.read.ttft_days import DAYS, KEY, DayKey
from store.write import totals_figures
from store.write.totals_figures import Key, Totals, canonical, digest, in_run, order


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
        move_days(conn, before, ttft_days.sums(conn, RUNS.c.id.in_(ids))[0])


def rehead(conn: Connection, run_id: str, old_head: str, new_head: str) -> bool:
    """Move a run's stored totals from its old chain head to its new one,
    when what was appended in between is nothing they sum: the figures stand
    and are re-digested, not recomputed. False, writing nothing, when a
    stored row does not check against the old head (altered, stale or
    damaged): the caller then recomputes them from the rows, as before."""
    try:
        totals = stored(conn, RUNS.c.id == run_id)
    except StoreDamaged:
        return False
    found = {(r.own, r.model, r.engine): (r.id, r.digest)
             for r in conn.execute(select(TOTALS.c.id, TOTALS.c.own, TOTALS.c.model, TOTALS.c.engine,
                                          TOTALS.c.digest).where(TOTALS.c.run_id == run_id))}
    before, _ = as_rows(totals, {run_id: old_head})
    if len(before) != len(found) or any(
            found.get((r["own"], r["model"], r["engine"]), (None, None))[1] != r["digest"] for r in before):
        return False
    after, _ = as_rows(totals, {run_id: new_head})
    for row in after:
        row_id, _ = found[(row["own"], row["model"], row["engine"])]
        conn.execute(update(TOTALS).where(TOTALS.c.id == row_id).values(digest=row["digest"]))
    return True


def forget(conn: Connection, run_ids: list[str]) -> None:
    """Take runs about to be deleted out of the day rollup and delete their totals."""
    move_days(conn, ttft_days.sums(conn, RUNS.c.id.in_(run_ids))[0], {})
    for table in DERIVED:
        conn.execute(delete(table).where(table.c.run_id.in_(run_ids)))


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


def _matches(key: DayKey) -> Any:
    return and_(*(DAYS.c[name].is_not_distinct_from(value) for name, value in zip(KEY, key, strict=True)))


def add_days(conn: Connection, delta: Mapping[DayKey, int]) -> None:
    """Add calls per key (negative: take them out), in sorted key order."""
    for key in sorted(delta, key=repr):
        n = delta[key]
        if n == 0:
            continue
        first = select(func.min(DAYS.c.id)).where(_matches(key)).scalar_subquery()
        if conn.execute(update(DAYS).where(DAYS.c.id == first).values(calls=DAYS.c.calls + n)).rowcount == 0:
            conn.execute(DAYS.insert().values({**dict(zip(KEY, key, strict=True)), "calls": n}))
        elif n < 0:
            conn.execute(delete(DAYS).where(_matches(key), DAYS.c.calls == 0))


def move_days(conn: Connection, before: Mapping[DayKey, int], after: Mapping[DayKey, int]) -> None:
    """The rollup follows runs whose TTFT rows went from ``before`` to ``after``."""
    add_days(conn, {k: after.get(k, 0) - before.get(k, 0) for k in before.keys() | after.keys()})
