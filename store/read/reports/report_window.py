"""Which runs and rows an aggregate report reads: the runs started in a
time window (real spend unless replays are asked for), those of them read
from their rows rather than their stored totals, a run's source and batch
as SQL, and a fetched column's type check."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Connection, and_, case, cast, func, select, true

from orchestrator.costing.figures import ESCROW_SOURCE
from orchestrator.interop.records import IMPORT_MODE
from store.read import run_totals
from store.read.run_totals import RUNS
from store.read.ttft_days import REPLAY_MODES
from store.schema.tables import BatchAttemptRow, ModelResponse, table_of

RESPONSES = table_of(ModelResponse)
BATCH_ATTEMPTS = table_of(BatchAttemptRow)


NUMBER_TYPES: frozenset[type] = frozenset((int, float, type(None)))


def window(since: float | None, until: float | None, include_replays: bool = False) -> Any:
    """Runs started in the window; unless ``include_replays``, not an offline
    replay nor a re-execution. (A fork's shared prefix, turns before its fork
    turn, is its parent's spend: the ``own`` flag of its totals.)"""
    created = RUNS.c.created_at
    bounds = [created >= since] if since is not None else []
    bounds += [created < until] if until is not None else []
    if not include_replays:
        bounds.append(RUNS.c.mode.not_in(REPLAY_MODES))
    return and_(true(), *bounds)


def source_sql(dialect: str) -> Any:
    """"escrow" for Escrow's own runs, the source format for imported ones
    (recorded in the run's genesis config)."""
    if dialect == "sqlite":
        fmt = func.json_extract(RUNS.c.config_json, "$.import.format")
    else:
        fmt = cast(RUNS.c.config_json, JSON)["import"]["format"].as_string()
    return case((RUNS.c.mode == IMPORT_MODE, func.coalesce(fmt, IMPORT_MODE)), else_=ESCROW_SOURCE)


def batch_note_sql(dialect: str, key: str) -> Any:
    """The batch or task a run's config names (``batches.batch_note``), NULL for a run outside a batch."""
    if dialect == "sqlite":
        return func.json_extract(RUNS.c.config_json, f"$.batch.{key}")
    return cast(RUNS.c.config_json, JSON)["batch"][key].as_string()


def unsummed(since: float | None, until: float | None, include_replays: bool, raw: bool) -> Any:
    """The runs in the window read from their rows: those without totals, or, ``raw``, all."""
    in_window = window(since, until, include_replays)
    return in_window if raw else and_(in_window, ~run_totals.has_totals())


def any_unsummed(conn: Connection, since: float | None, until: float | None, include_replays: bool,
                 raw: bool) -> bool:
    """Whether a run in the window is read from its rows: one pass over the
    window's runs, so that a fleet of finished runs skips the queries over
    the rows (their plans may scan a whole table to find no run)."""
    return raw or conn.execute(select(RUNS.c.id).where(unsummed(since, until, include_replays, raw))
                               .limit(1)).first() is not None


def off_types(values: Any, allowed: frozenset[type]) -> bool:
    """Whether a column of fetched values holds a value of another type (one C-speed pass)."""
    return not set(map(type, values)) <= allowed
