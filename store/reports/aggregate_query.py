"""The queries behind ``escrow report --since/--until --by``: sums per (run,
model) and the calls' TTFTs, for runs started in a time window.

Each query starts from ``runs`` through ``ix_runs_created_at`` and reaches a
run's responses and attempts through their ``(run_id, model, ...)`` covering
indexes (schema 7): the model is the copy of the call's on each row, so no
call row is read. ``joined=True`` gives the schema-6 form, which joins
``model_calls`` for the model, for the bench to compare. Only answered
calls (with a response row) are counted; cached tokens are clamped to each
call's prompt tokens in SQL, so sums can be priced linearly. TTFTs come
back as a per-group histogram at millisecond resolution.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import JSON, Connection, Integer, Select, and_, case, cast, func, literal, or_, select, true

from orchestrator.costing.figures import DAY_FORMAT, ESCROW_SOURCE, NO_BATCH, NO_ENGINE, NO_VERDICT, RunSlice
from orchestrator.interop.records import IMPORT_MODE
from store.batch_tables import BatchAttemptRow
from store.cells import check_numbers, not_a_number
from store.store import Store
from store.tables import CallAttempt, ModelCall, ModelResponse, Run, ToolExecution, table_of

RUNS = table_of(Run)
CALLS = table_of(ModelCall)
RESPONSES = table_of(ModelResponse)
TOOLS = table_of(ToolExecution)
ATTEMPTS = table_of(CallAttempt)
BATCH_ATTEMPTS = table_of(BatchAttemptRow)

MODEL = RESPONSES.c["gen_ai.request.model"]
ATTEMPT_MODEL = ATTEMPTS.c["gen_ai.request.model"]
CALL_MODEL = CALLS.c["gen_ai.request.model"]
PROMPT = RESPONSES.c["gen_ai.usage.input_tokens"]
CACHED = RESPONSES.c["gen_ai.usage.cache_read.input_tokens"]
OUTPUT = RESPONSES.c["gen_ai.usage.output_tokens"]
SUMMED = ("gen_ai.usage.input_tokens", "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.output_tokens",
          "total_s", "decode_s", "ttft_s", "n_attempts")
ATTEMPT_SUMMED = ("duration_s", "backoff_s")


# Runs whose model calls were served from a recording: no spend of their own.
REPLAY_MODES = ("replay", "reexecute")


def window(since: float | None, until: float | None, rows: Any = None, include_replays: bool = False) -> Any:
    """Runs started in the window; unless ``include_replays``, only the
    ``rows`` that were real spend: not an offline replay's or a
    re-execution's, nor a fork's shared prefix (turns before its fork turn,
    which are its parent's spend)."""
    created = RUNS.c.created_at
    bounds = [created >= since] if since is not None else []
    bounds += [created < until] if until is not None else []
    if not include_replays:
        bounds.append(RUNS.c.mode.not_in(REPLAY_MODES))
        if rows is not None:
            bounds.append(or_(RUNS.c.forked_at_turn.is_(None), rows.c.turn >= RUNS.c.forked_at_turn))
    return and_(true(), *bounds)


def source_sql(dialect: str) -> Any:
    """"escrow" for Escrow's own runs, the source format for imported ones
    (recorded in the run's genesis config)."""
    if dialect == "sqlite":
        fmt = func.json_extract(RUNS.c.config_json, "$.import.format")
    else:
        fmt = cast(RUNS.c.config_json, JSON)["import"]["format"].as_string()
    return case((RUNS.c.mode == IMPORT_MODE, func.coalesce(fmt, IMPORT_MODE)), else_=ESCROW_SOURCE)


def _with_model(rows: Any, joined: bool) -> tuple[Any, Any]:
    """(the FROM clause runs-to-rows, the model column): the copy on the rows,
    or, ``joined``, the call's through a join."""
    base = RUNS.join(rows, rows.c.run_id == RUNS.c.id)
    if joined:
        return base.join(CALLS, CALLS.c.id == rows.c.call_id), CALL_MODEL
    return base, rows.c["gen_ai.request.model"]


def slices_query(since: float | None, until: float | None, by: str = "model",
                 include_replays: bool = False, dialect: str = "sqlite", joined: bool = False) -> Select[Any]:
    """Sums per (run, model), and per engine too when grouping by it (only
    then, so the other groupings keep reading the covering index)."""
    clamped = case((CACHED > PROMPT, PROMPT), else_=CACHED)
    engine = func.coalesce(RESPONSES.c.engine, NO_ENGINE) if by == "engine" else literal(None)
    joins, model = _with_model(RESPONSES, joined)
    keys = (RUNS.c.id, model) + ((engine,) if by == "engine" else ())
    return (
        select(
            RUNS.c.id, RUNS.c.created_at, RUNS.c.status, RUNS.c.verdict, model, source_sql(dialect), func.count(),
            func.sum(PROMPT), func.sum(clamped), func.sum(OUTPUT),
            # GPU time is the server's: the attempts' HTTP time (attempt_time_query);
            # a call recorded without attempts counts its whole duration.
            func.sum(case((RESPONSES.c.n_attempts == 0, RESPONSES.c.total_s), else_=0.0)),
            func.coalesce(func.sum(RESPONSES.c.decode_s), 0.0), func.sum(RESPONSES.c.n_attempts - 1), engine,
            _damage(RESPONSES, SUMMED, dialect),
        )
        .select_from(joins)
        .where(window(since, until, RESPONSES, include_replays))
        .group_by(*keys)
    )


def _damage(table: Any, columns: tuple[str, ...], dialect: str) -> Any:
    """1 when a summed cell is not a number (SQLite would sum it as 0): the
    check rides on the aggregate's own scan; ``_stop_if_damaged`` names it."""
    return func.max(case((not_a_number(table, columns), 1), else_=0)) if dialect == "sqlite" else literal(0)


def _stop_if_damaged(conn: Connection, table: Any, columns: tuple[str, ...], since: float | None,
                     until: float | None) -> None:
    check_numbers(conn, table, table.c.run_id.in_(select(RUNS.c.id).where(window(since, until))), columns)


def attempt_time_query(since: float | None, until: float | None, include_replays: bool = False,
                       joined: bool = False, dialect: str = "sqlite") -> Select[Any]:
    """Per (run, model): seconds inside HTTP attempts, and backoff slept between them."""
    joins, model = _with_model(ATTEMPTS, joined)
    return (
        select(RUNS.c.id, model, func.coalesce(func.sum(ATTEMPTS.c.duration_s), 0.0),
               func.coalesce(func.sum(ATTEMPTS.c.backoff_s), 0.0), _damage(ATTEMPTS, ATTEMPT_SUMMED, dialect))
        .select_from(joins)
        .where(window(since, until, ATTEMPTS, include_replays))
        .group_by(RUNS.c.id, model)
    )


def tool_time_query(since: float | None, until: float | None, include_replays: bool = False) -> Select[Any]:
    return (
        select(RUNS.c.id, func.coalesce(func.sum(TOOLS.c.duration_s), 0.0))
        .select_from(RUNS.join(TOOLS, TOOLS.c.run_id == RUNS.c.id))
        .where(window(since, until, TOOLS, include_replays))
        .group_by(RUNS.c.id)
    )


def group_key_sql(by: str, dialect: str, model: Any = MODEL) -> Any:
    """The SQL twin of ``orchestrator.costing.aggregate.group_key``."""
    if by == "model":
        return model
    if by == "status":
        return RUNS.c.status
    if by == "verdict":
        return func.coalesce(RUNS.c.verdict, NO_VERDICT)
    if by == "engine":
        return func.coalesce(RESPONSES.c.engine, NO_ENGINE)
    if by == "batch":
        return func.coalesce(BATCH_ATTEMPTS.c.batch_id, NO_BATCH)
    if by == "day" and dialect == "sqlite":
        return func.strftime(DAY_FORMAT, RUNS.c.created_at, "unixepoch")
    if by == "source":
        return source_sql(dialect)
    if by == "day":
        return func.to_char(func.timezone("UTC", func.to_timestamp(RUNS.c.created_at)), "YYYY-MM-DD")
    raise ValueError(f"cannot group by {by!r}")


def ttft_query(since: float | None, until: float | None, by: str = "model", dialect: str = "sqlite",
               include_replays: bool = False, joined: bool = False) -> Select[Any]:
    """TTFTs to the millisecond, counted per group: a histogram, not a million rows."""
    joins, model = _with_model(RESPONSES, joined)
    key = group_key_sql(by, dialect, model)
    millis = cast(func.round(RESPONSES.c.ttft_s * 1000), Integer)
    if by == "batch":
        joins = joins.outerjoin(BATCH_ATTEMPTS, BATCH_ATTEMPTS.c.run_id == RUNS.c.id)
    return (
        select(key, millis, func.count())
        .select_from(joins)
        .where(window(since, until, RESPONSES, include_replays), RESPONSES.c.ttft_s.is_not(None))
        .group_by(key, millis)
    )


def run_slices(conn: Connection, since: float | None, until: float | None, by: str = "model",
               include_replays: bool = False, joined: bool = False) -> list[RunSlice]:
    tool_s: dict[str, float] = dict(conn.execute(tool_time_query(since, until, include_replays)).all())
    attempt_rows = conn.execute(attempt_time_query(since, until, include_replays, joined, conn.dialect.name)).all()
    if any(row[-1] for row in attempt_rows):
        _stop_if_damaged(conn, ATTEMPTS, ATTEMPT_SUMMED, since, until)
    attempts = {(run_id, model): (http, wait) for run_id, model, http, wait, _ in attempt_rows}
    rows = conn.execute(slices_query(since, until, by, include_replays, conn.dialect.name, joined)).all()
    if any(row[-1] for row in rows):
        _stop_if_damaged(conn, RESPONSES, SUMMED, since, until)
    batch_of: dict[str, str] = dict(conn.execute(select(BATCH_ATTEMPTS.c.run_id, BATCH_ATTEMPTS.c.batch_id)
                                 .where(BATCH_ATTEMPTS.c.run_id.is_not(None))).all())
    return [
        RunSlice(
            run_id=run_id,
            created_at=created,
            status=status,
            verdict=verdict,
            model=model,
            source=source,
            calls=n,
            prompt_tokens=prompt or 0,
            cached_tokens=cached or 0,
            completion_tokens=output or 0,
            gpu_s=(total or 0.0) + attempts.get((run_id, model), (0.0, 0.0))[0],
            wait_s=attempts.get((run_id, model), (0.0, 0.0))[1],
            decode_s=decode or 0.0,
            retries=retries or 0,
            tool_s=tool_s.get(run_id, 0.0),
            engine=engine,
            batch=batch_of.get(run_id),
        )
        for (
            run_id, created, status, verdict, model, source, n, prompt, cached, output, total, decode, retries, engine,
            _,
        ) in rows
    ]


def ttft_histogram(conn: Connection, since: float | None, until: float | None, by: str,
                   include_replays: bool = False, joined: bool = False) -> Iterator[tuple[str, float, int]]:
    for key, millis, n in conn.execute(ttft_query(since, until, by, conn.dialect.name, include_replays, joined)):
        yield str(key), millis / 1000.0, n


def read_slices(store: Store, *, by: str, since: float | None, until: float | None,
                include_replays: bool = False, joined: bool = False,
                ) -> tuple[list[RunSlice], list[tuple[str, float, int]]]:
    """The figures an aggregate report is computed from: one slice per (run,
    model) and the TTFT histogram per group. Real spend only, unless
    ``include_replays`` (see ``window``). ``joined``: the schema-6 queries
    (the bench's comparison)."""
    with store.read() as conn:
        pieces = run_slices(conn, since, until, by, include_replays, joined)
        ttfts = list(ttft_histogram(conn, since, until, by, include_replays, joined))
    return pieces, ttfts


def query_plans(store: Store, since: float | None, until: float | None, joined: bool = False,
                by: str = "model") -> dict[str, list[str]]:
    """SQLite's EXPLAIN QUERY PLAN of each report query (for the bench)."""
    plans = {}
    queries: dict[str, Any] = {
        "slices": slices_query(since, until, by, joined=joined),
        "attempt_time": attempt_time_query(since, until, joined=joined),
        "tool_time": tool_time_query(since, until), "ttft": ttft_query(since, until, by, joined=joined),
    }
    with store.read() as conn:
        for name, query in queries.items():
            compiled = query.compile(conn, compile_kwargs={"render_postcompile": True})
            params = tuple(compiled.params[key] for key in compiled.positiontup or ())
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", params).all()
            plans[name] = [str(row[-1]) for row in rows]
    return plans
