"""The TTFT histogram of an aggregate report, per group: from the per-day
rollup (``store.read.ttft_days``) over the window's whole days, from the runs'
stored buckets over the rest, and from the rows of the runs without totals;
the rollup rows read are checked against their runs' totals."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, Integer, and_, cast, func, or_, select, true

from orchestrator.costing.figures import DAY_FORMAT, NO_BATCH, NO_ENGINE, NO_VERDICT
from store.check.cells import check_numbers
from store.engine import driver_rows
from store.errors import StoreDamaged, TtftRollupMismatch
from store.read import run_totals, ttft_buckets
from store.read.liveness import now_or, status_sql
from store.read.reports.report_window import (
    BATCH_ATTEMPTS,
    NUMBER_TYPES,
    RESPONSES,
    any_unsummed,
    off_types,
    source_sql,
    unsummed,
    window,
)
from store.read.run_totals import RUNS, TTFTS
from store.read.ttft_buckets import TTFT_CHECK_MODULUS, bucket_seconds
from store.read.ttft_days import DAY_S, DAYS, day_of
from store.text_codec import unescape


def group_key_sql(by: str, dialect: str, model: Any, engine: Any, now: float) -> Any:
    """The SQL twin of ``orchestrator.costing.aggregate.group_key``."""
    if by == "model":
        return model
    if by == "status":
        return status_sql(now)
    if by == "verdict":
        return func.coalesce(RUNS.c.verdict, NO_VERDICT)
    if by == "engine":
        return func.coalesce(engine, NO_ENGINE)
    if by == "batch":
        return func.coalesce(BATCH_ATTEMPTS.c.batch_id, NO_BATCH)
    if by == "day" and dialect == "sqlite":
        return func.strftime(DAY_FORMAT, RUNS.c.created_at, "unixepoch")
    if by == "source":
        return source_sql(dialect)
    if by == "day":
        return func.to_char(func.timezone("UTC", func.to_timestamp(RUNS.c.created_at)), "YYYY-MM-DD")
    raise ValueError(f"cannot group by {by!r}")


ROLLED_UP_BY = ("model", "engine", "day")
"""Groupings the per-day TTFT rollup (``store.read.ttft_days``) holds the key of."""


def whole_days(since: float | None, until: float | None) -> tuple[int | None, int | None] | None:
    """The days [first, end) the window covers whole (None: unbounded), or None when it covers none."""
    first = None if since is None else day_of(since) + (since > day_of(since) * DAY_S)
    end = None if until is None else day_of(until)
    return None if first is not None and end is not None and first >= end else (first, end)


def ttft_queries(since: float | None, until: float | None, by: str, dialect: str, include_replays: bool = False,
                 raw: bool = False, now: float | None = None) -> dict[str, Any]:
    """Per group: calls per TTFT bucket from the per-day rollup over the
    window's whole days (grouped by model, engine or day), from the runs'
    stored buckets over the rest of it, and calls per millisecond from the
    rows of the runs without totals."""
    def grouped(rows: Any, model: Any, engine: Any) -> tuple[Any, Any]:
        joins = RUNS.join(rows, rows.c.run_id == RUNS.c.id)
        if by == "batch":
            joins = joins.outerjoin(BATCH_ATTEMPTS, BATCH_ATTEMPTS.c.run_id == RUNS.c.id)
        return joins, group_key_sql(by, dialect, model, engine, at)

    at = now_or(now)
    days = whole_days(since, until) if by in ROLLED_UP_BY else None
    in_window = window(since, until, include_replays)
    queries: dict[str, Any] = {}
    if days is not None:
        first, end = days
        key = DAYS.c.day if by == "day" else group_key_sql(by, dialect, DAYS.c.model, DAYS.c.engine, at)
        bounds = [DAYS.c.day >= first] if first is not None else []
        bounds += [DAYS.c.day < end] if end is not None else []
        real = [] if include_replays else [DAYS.c.own == 1, DAYS.c.replay == 0]
        queries["days"] = (select(key, DAYS.c.bucket_ms, func.sum(DAYS.c.calls)).where(true(), *bounds, *real)
                           .group_by(key, DAYS.c.bucket_ms))
        created = RUNS.c.created_at
        edges = [created < first * DAY_S] if first is not None else []
        edges += [created >= end * DAY_S] if end is not None else []
        in_window = and_(in_window, or_(*edges)) if edges else None
    if in_window is not None:
        joins, key = grouped(TTFTS, TTFTS.c.model, TTFTS.c.engine)
        spend = true() if include_replays else TTFTS.c.own == 1
        queries["stored"] = (select(key, TTFTS.c.bucket_ms, func.sum(TTFTS.c.calls)).select_from(joins)
                             .where(in_window, run_totals.has_totals(), spend)
                             .group_by(key, TTFTS.c.bucket_ms))
    joins, key = grouped(RESPONSES, RESPONSES.c[run_totals.MODEL], RESPONSES.c.engine)
    own = true() if include_replays else run_totals.own_flag(RESPONSES) == 1
    millis = cast(func.round(RESPONSES.c.ttft_s * 1000), Integer)
    queries["from_rows"] = (select(key, millis, func.count()).select_from(joins)
                            .where(unsummed(since, until, include_replays, raw), own, RESPONSES.c.ttft_s.is_not(None))
                            .group_by(key, millis))
    return {"from_rows": queries["from_rows"]} if raw else queries


def day_label(day: int) -> str:
    return datetime.fromtimestamp(day * DAY_S, tz=timezone.utc).strftime(DAY_FORMAT)


def group_label(key: Any, by: str, *, rolled_up: bool) -> str:
    """A TTFT row's group key as ``group_key`` makes it: the day of the
    rollup's day number; a model or engine name unescaped (driver rows hold
    them as stored, docs/SCHEMA.md)."""
    if rolled_up and by == "day":
        return day_label(key)
    if by in ("model", "engine") and isinstance(key, str):
        return unescape(key)
    return str(key)


def ttft_histogram(conn: Connection, since: float | None, until: float | None, by: str,
                   include_replays: bool = False, raw: bool = False,
                   from_rows: bool | None = None, now: float | None = None,
                   checks: dict[str, int] | None = None) -> list[tuple[str, float, int]]:
    """(group key, TTFT seconds, calls): the buckets of docs/SCHEMA.md, whichever way a run is read.
    ``from_rows``: whether a run in the window is read from its rows (None: find out).
    ``checks``: per group, the TTFT checks of its runs' stored totals, which
    the rollup rows summed for it must match (``TtftRollupMismatch``)."""
    counts: dict[tuple[str, int], int] = defaultdict(int)
    summed: dict[str, int] = defaultdict(int)  # per group, the check of the rollup rows read
    queries = ttft_queries(since, until, by, conn.dialect.name, include_replays, raw, now)
    if from_rows is None:
        from_rows = any_unsummed(conn, since, until, include_replays, raw)
    if not from_rows:
        del queries["from_rows"]
    labels: dict[Any, str] = {}
    read_from = {"days": DAYS, "stored": TTFTS, "from_rows": RESPONSES}
    for name, query in queries.items():
        rows = driver_rows(conn, query)
        # A number cell holding text (only SQLite stores one) is named, never int()'d nor summed as 0.
        if (off_types((r[1] for r in rows), NUMBER_TYPES) or off_types((r[2] for r in rows), frozenset((int,)))
                or (name == "days" and by == "day" and off_types((r[0] for r in rows), frozenset((int,))))):
            check_numbers(conn, read_from[name], true())
            raise StoreDamaged(f"damaged store: a cell of {read_from[name].name} summed for the TTFT histogram "
                               "is not a number", table=read_from[name].name)
        for key, value, n in rows:
            bucket = ttft_buckets.ttft_bucket(int(value)) if name == "from_rows" else int(value)
            if key not in labels:
                labels[key] = group_label(key, by, rolled_up=name == "days")
            counts[(labels[key], bucket)] += int(n)
            if name != "from_rows":
                summed[labels[key]] += ttft_buckets.bucket_weight(bucket) * int(n)
    if checks is not None:
        off = sorted(group for group in summed.keys() | checks.keys()
                     if summed.get(group, 0) % TTFT_CHECK_MODULUS != checks.get(group, 0))
        if off:
            raise TtftRollupMismatch(by, off)
    # A rollup key may sum to nothing (its runs deleted): the rows never give one.
    return [(key, bucket_seconds(bucket), n) for (key, bucket), n in sorted(counts.items()) if n]
