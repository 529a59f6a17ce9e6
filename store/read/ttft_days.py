"""The TTFT histogram of the runs with totals, summed per UTC day the run
started (schema 9), so an aggregate report by model, engine or day over
whole days reads a few rows a day instead of every run's TTFT buckets.

One row per (day, replay, spend flag, model, engine, bucket): the calls of
``run_ttfts`` rows of the runs started that day. ``day`` is the day number
since the epoch (``floor(created_at / 86400)``); ``replay`` is 1 for an
offline replay or re-execution (left out of real spend). It is derived data,
kept equal to the sum of ``run_ttfts``: ``totals_write.write`` moves a run's
buckets out and in again (``totals_write.move_days``), ``gc`` moves a deleted
run's out (``totals_write.forget``),
migration 9 builds it (``store.schema.migrations``), and ``escrow verify`` recomputes it (``problems``).

A key is updated in place on its lowest id; a key two writers inserted at
once (PostgreSQL) holds two rows, which a report sums like one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Table, and_, select, true

from store.check import totals_check
from store.check.cells import check_row
from store.read.run_totals import RUNS, TTFTS, has_totals
from store.schema.tables import TtftDay, table_of

DAY_S = 86400
# Runs whose model calls were served from a recording: no spend of their own.
REPLAY_MODES = ("replay", "reexecute")


DAYS: Table = table_of(TtftDay)
KEY = ("day", "replay", "own", "model", "engine", "bucket_ms")
DayKey = tuple[int, int, int, str | None, str | None, int]


def day_of(created_at: float) -> int:
    """The day ``d`` with ``d * DAY_S <= created_at < (d + 1) * DAY_S``, the
    bounds a report's window compares with (a rounded division may be one off)."""
    day = math.floor(created_at / DAY_S)
    if created_at < day * DAY_S:
        return day - 1
    return day + 1 if created_at >= (day + 1) * DAY_S else day


def sums(conn: Connection, runs: Any) -> tuple[dict[DayKey, int], dict[DayKey, set[str]]]:
    """The rollup of the ``run_ttfts`` of the runs with totals that ``runs``
    (a condition on ``runs``) selects, and which runs each key sums."""
    query = (select(RUNS.c.id, RUNS.c.created_at, RUNS.c.mode, TTFTS.c.own, TTFTS.c.model, TTFTS.c.engine,
                    TTFTS.c.bucket_ms, TTFTS.c.calls, TTFTS.c.id.label("ttft_id"))
             .join(RUNS, RUNS.c.id == TTFTS.c.run_id).where(runs, has_totals()))
    out: dict[DayKey, int] = defaultdict(int)
    whose: dict[DayKey, set[str]] = defaultdict(set)
    for run_id, created, mode, own, model, engine, bucket, calls, ttft_id in conn.execute(query):
        if not all(type(v) is int for v in (own, bucket, calls)) or not isinstance(created, (int, float)):
            check_row(TTFTS, {"id": ttft_id, "own": own, "bucket_ms": bucket, "calls": calls})
            check_row(RUNS, {"id": run_id, "created_at": created})
        key = (day_of(created), int(mode in REPLAY_MODES), own, model, engine, bucket)
        out[key] += calls
        whose[key].add(run_id)
    return dict(out), dict(whose)


def stored(conn: Connection, days: Iterable[int] | None) -> tuple[dict[DayKey, int], dict[DayKey, list[int]]]:
    where = true() if days is None else DAYS.c.day.in_(sorted(set(days)))
    out: dict[DayKey, int] = defaultdict(int)
    ids: dict[DayKey, list[int]] = defaultdict(list)
    for row in conn.execute(select(DAYS).where(where).order_by(DAYS.c.id)).mappings():
        check_row(DAYS, row)
        key: DayKey = tuple(row[name] for name in KEY)  # type: ignore[assignment]
        out[key] += row["calls"]
        ids[key].append(row["id"])
    return {k: n for k, n in out.items() if n}, dict(ids)


def problems(conn: Connection, run_id: str | None = None,
             explained: Iterable[str] = ()) -> dict[str, tuple[str, str]]:
    """Per run, (row id, what differs) where the rollup of a day the run
    counts in is not the sum of that day's ``run_ttfts``. A key is charged to
    the runs that sum it; a key no run sums (a row added behind the store's
    back) to the runs of its day, or, with none, to every run with totals. A
    key one of the ``explained`` runs sums is left out: that run's own TTFT
    rows differ (named already). With ``run_id``, the same answer for that
    run alone: another run's key, or one whose difference another run's
    changed rows explain, is not this run's."""
    skip = set(explained)
    days: list[int] | None = None
    runs: Any = true()
    if run_id is not None:
        created = conn.execute(select(RUNS.c.created_at).where(RUNS.c.id == run_id)).scalar()
        if created is None:
            return {}
        day = day_of(created)
        days, runs = [day], and_(RUNS.c.created_at >= day * DAY_S, RUNS.c.created_at < (day + 1) * DAY_S)
    want, whose = sums(conn, runs)
    have, ids = stored(conn, days)
    found: dict[str, tuple[str, str]] = {}
    for key in sorted(want.keys() | have.keys(), key=repr):
        owners = whose.get(key, set())
        if want.get(key, 0) == have.get(key, 0) or owners & skip:
            continue
        if run_id is not None and owners and (
                run_id not in owners or any(totals_check.problems(conn, other) for other in sorted(owners - {run_id}))):
            continue
        row = ",".join(str(i) for i in ids.get(key, [])) or "none"
        problem = (f"ttft_days row {row} (day {key[0]}, model {key[3]!r}, engine {key[4]!r}, own {key[2]}, "
                   f"bucket {key[5]} ms) holds {have.get(key, 0)} calls, the runs' run_ttfts add up to "
                   f"{want.get(key, 0)}")
        blamed = [run_id] if run_id is not None else sorted(owners or _runs_of(conn, key[0]))
        for blame in blamed:
            found.setdefault(blame, (row, problem))
    return found


def _runs_of(conn: Connection, day: int) -> set[str]:
    that_day = and_(RUNS.c.created_at >= day * DAY_S, RUNS.c.created_at < (day + 1) * DAY_S, has_totals())
    ids = set(conn.execute(select(RUNS.c.id).where(that_day)).scalars())
    return ids or set(conn.execute(select(RUNS.c.id).where(has_totals())).scalars())
