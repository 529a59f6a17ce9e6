"""The queries behind ``escrow report --since/--until --by``: sums per (run,
model) and the calls' TTFTs, for runs started in a time window.

Each query starts from ``runs`` through ``ix_runs_created_at`` and reaches a
run's rows through the ``(run_id, seq)`` unique index of each chained table,
and a response's call through the ``model_calls`` primary key. Only answered
calls (with a response row) are counted; cached tokens are clamped to each
call's prompt tokens in SQL, so sums can be priced linearly. TTFTs come
back as a per-group histogram at millisecond resolution.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection, Integer, Select, and_, case, cast, func, select, true

from orchestrator.costing import AggregateReport, RunSlice, aggregate
from orchestrator.costing.aggregate import DAY_FORMAT, NO_BATCH, NO_VERDICT
from policies.price_table import PriceTable
from store.batch_tables import BatchAttemptRow
from store.store import Store
from store.tables import ModelCall, ModelResponse, Run, ToolExecution

RUNS = Run.__table__  # type: ignore[attr-defined]
CALLS = ModelCall.__table__  # type: ignore[attr-defined]
RESPONSES = ModelResponse.__table__  # type: ignore[attr-defined]
TOOLS = ToolExecution.__table__  # type: ignore[attr-defined]
ATTEMPTS = BatchAttemptRow.__table__  # type: ignore[attr-defined]

MODEL = CALLS.c["gen_ai.request.model"]
PROMPT = RESPONSES.c["gen_ai.usage.input_tokens"]
CACHED = RESPONSES.c["gen_ai.usage.cache_read.input_tokens"]
OUTPUT = RESPONSES.c["gen_ai.usage.output_tokens"]


def window(since: float | None, until: float | None) -> Any:
    created = RUNS.c.created_at
    bounds = [created >= since] if since is not None else []
    bounds += [created < until] if until is not None else []
    return and_(true(), *bounds)


def slices_query(since: float | None, until: float | None) -> Select[Any]:
    clamped = case((CACHED > PROMPT, PROMPT), else_=CACHED)
    return (
        select(
            RUNS.c.id, RUNS.c.created_at, RUNS.c.status, RUNS.c.verdict, MODEL, func.count(),
            func.sum(PROMPT), func.sum(clamped), func.sum(OUTPUT), func.sum(RESPONSES.c.total_s),
            func.coalesce(func.sum(RESPONSES.c.decode_s), 0.0), func.sum(RESPONSES.c.n_attempts - 1),
        )
        .select_from(RUNS.join(RESPONSES, RESPONSES.c.run_id == RUNS.c.id).join(CALLS, CALLS.c.id == RESPONSES.c.call_id))
        .where(window(since, until))
        .group_by(RUNS.c.id, MODEL)
    )


def tool_time_query(since: float | None, until: float | None) -> Select[Any]:
    return (
        select(RUNS.c.id, func.coalesce(func.sum(TOOLS.c.duration_s), 0.0))
        .select_from(RUNS.join(TOOLS, TOOLS.c.run_id == RUNS.c.id))
        .where(window(since, until))
        .group_by(RUNS.c.id)
    )


def group_key_sql(by: str, dialect: str) -> Any:
    """The SQL twin of ``orchestrator.costing.aggregate.group_key``."""
    if by == "model":
        return MODEL
    if by == "status":
        return RUNS.c.status
    if by == "verdict":
        return func.coalesce(RUNS.c.verdict, NO_VERDICT)
    if by == "batch":
        return func.coalesce(ATTEMPTS.c.batch_id, NO_BATCH)
    if by == "day" and dialect == "sqlite":
        return func.strftime(DAY_FORMAT, RUNS.c.created_at, "unixepoch")
    if by == "day":
        return func.to_char(func.timezone("UTC", func.to_timestamp(RUNS.c.created_at)), "YYYY-MM-DD")
    raise ValueError(f"cannot group by {by!r}")


def ttft_query(since: float | None, until: float | None, by: str = "model", dialect: str = "sqlite") -> Select[Any]:
    """TTFTs to the millisecond, counted per group: a histogram, not a million rows."""
    key = group_key_sql(by, dialect)
    millis = cast(func.round(RESPONSES.c.ttft_s * 1000), Integer)
    joined = RUNS.join(RESPONSES, RESPONSES.c.run_id == RUNS.c.id).join(CALLS, CALLS.c.id == RESPONSES.c.call_id)
    if by == "batch":
        joined = joined.outerjoin(ATTEMPTS, ATTEMPTS.c.run_id == RUNS.c.id)
    return (
        select(key, millis, func.count())
        .select_from(joined)
        .where(window(since, until), RESPONSES.c.ttft_s.is_not(None))
        .group_by(key, millis)
    )


def run_slices(conn: Connection, since: float | None, until: float | None) -> list[RunSlice]:
    tool_s = dict(conn.execute(tool_time_query(since, until)).all())
    batch_of = dict(conn.execute(select(ATTEMPTS.c.run_id, ATTEMPTS.c.batch_id).where(ATTEMPTS.c.run_id.is_not(None))).all())
    return [
        RunSlice(
            run_id=run_id, created_at=created, status=status, verdict=verdict, model=model, calls=n,
            prompt_tokens=prompt or 0, cached_tokens=cached or 0, completion_tokens=output or 0, gpu_s=total or 0.0,
            decode_s=decode or 0.0, retries=retries or 0, tool_s=tool_s.get(run_id, 0.0), batch=batch_of.get(run_id),
        )
        for run_id, created, status, verdict, model, n, prompt, cached, output, total, decode, retries
        in conn.execute(slices_query(since, until))
    ]


def ttft_histogram(conn: Connection, since: float | None, until: float | None, by: str) -> Iterator[tuple[str, float, int]]:
    for key, millis, n in conn.execute(ttft_query(since, until, by, conn.dialect.name)):
        yield str(key), millis / 1000.0, n


def report_runs(store: Store, *, by: str, since: float | None, until: float | None, prices: PriceTable) -> AggregateReport:
    with store.read() as conn:
        pieces = run_slices(conn, since, until)
        ttfts = list(ttft_histogram(conn, since, until, by))
    return aggregate(pieces, ttfts, by=by, prices=prices.lookup, price_version=prices.version, since=since, until=until)


def query_plans(store: Store, since: float | None, until: float | None) -> dict[str, list[str]]:
    """SQLite's EXPLAIN QUERY PLAN of each report query (for the bench)."""
    plans = {}
    with store.read() as conn:
        for name, query in (("slices", slices_query), ("tool_time", tool_time_query), ("ttft", ttft_query)):
            compiled = query(since, until).compile(conn)
            params = tuple(compiled.params[key] for key in compiled.positiontup or ())
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", params).all()
            plans[name] = [str(row[-1]) for row in rows]
    return plans
