"""Schema versions and the numbered migrations between them.

A new store is created at the latest schema from the table models and every
migration is stamped as applied. An existing store at version v gets the
migrations numbered above v, each in its own transaction, in order. A store
whose version is above ``LATEST`` was written by a newer Escrow and is refused.
The history is documented in docs/SCHEMA.md; a migration, once released, is
never edited.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    exists,
    inspect,
    select,
)
from sqlmodel import SQLModel

from store import (
    batch_tables,
    content_migration,
    model_column,
    run_totals,
    schema_version,
    tables,
    totals_write,
    ttft_days,
)
from store.run_totals import DERIVED, RUNS, TOTALS, has_totals
from store.tables import table_of

migration_log_metadata = MetaData()
MIGRATION_LOG = Table(
    "escrow_migrations",
    migration_log_metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("name", String, nullable=False),
    Column("applied_at", Float, nullable=False),
)


@dataclass(frozen=True)
class Migration:
    """``apply`` runs in one transaction with the version stamp. A migration
    with ``backfill`` instead has ``apply`` idempotent (it is re-run when an
    interrupted upgrade resumes), then ``backfill`` commits its own batches,
    and the stamp comes last."""

    version: int
    name: str
    apply: Callable[[Connection], None]
    backfill: Callable[[Engine], None] | None = None


def _baseline(conn: Connection) -> None:
    """Version 1 is the first released schema; stores are only ever created at
    the latest version, so this exists to be stamped, not run."""
    raise RuntimeError("schema 1 is created from the models, never migrated to")


V2_INDEXES = (
    ("runs", "ix_runs_created_at", ("created_at",)),
    ("runs", "ix_runs_status", ("status", "created_at")),
    ("runs", "ix_runs_verdict", ("verdict", "created_at")),
    ("runs", "ix_runs_model", ("gen_ai.request.model", "created_at")),
    ("model_calls", "ix_model_calls_request_sha256", ("request_sha256",)),
    ("model_responses", "ix_model_responses_status", ("status",)),
    ("events", "ix_events_kind", ("kind",)),
)


V3_INDEXES = (
    ("model_responses", "ix_model_responses_usage", (
        "run_id", "call_id", "gen_ai.usage.input_tokens", "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.output_tokens", "total_s", "decode_s", "ttft_s", "n_attempts",
    )),
)


# (table, column, SQL type): nullable columns added by migration 4. NULL
# columns are left out of the hashed row form, so old chains stay valid.
V4_COLUMNS = (
    ("model_responses", "reasoning", "TEXT"),
    ("model_responses", "reasoning_tokens", "INTEGER"),
    ("model_responses", "reasoning_convention", "VARCHAR"),
)


def _batch_tables(conn: Connection) -> None:
    """Batches, their tasks and attempts, and run leases. Self-contained (it only
    creates new tables), so it can be renumbered when migrations are merged."""
    SQLModel.metadata.create_all(conn, tables=[table_of(m) for m in batch_tables.BATCH_TABLES])


def _teacher_scores(conn: Connection) -> None:
    """Self-contained (one new table), so it can be renumbered when migrations are merged."""
    SQLModel.metadata.create_all(conn, tables=[table_of(tables.TeacherScoreRow)])


def _create_indexes(conn: Connection, specs: tuple[tuple[str, str, tuple[str, ...]], ...]) -> None:
    meta = MetaData()
    for table_name, index_name, columns in specs:
        table = Table(table_name, meta, autoload_with=conn)
        Index(index_name, *(table.c[c] for c in columns)).create(conn, checkfirst=True)


def _listing_indexes(conn: Connection) -> None:
    """Indexes behind ``escrow runs`` filters, request look-up by sha256 and reports."""
    _create_indexes(conn, V2_INDEXES)


def _report_indexes(conn: Connection) -> None:
    """A covering index for aggregate reports: usage and timings of a run's
    responses without reading their envelope rows."""
    _create_indexes(conn, V3_INDEXES)


def _reasoning_columns(conn: Connection) -> None:
    """The model's separated reasoning (``reasoning_content``/``reasoning``)
    and ``completion_tokens_details.reasoning_tokens`` with its convention."""
    for table_name, column, sql_type in V4_COLUMNS:
        if column not in {c["name"] for c in inspect(conn).get_columns(table_name)}:
            conn.exec_driver_sql(f'ALTER TABLE {table_name} ADD COLUMN "{column}" {sql_type}')


# Per-run totals (schemas 8, 10-12): each backfill recomputes a batch of runs per
# transaction in id order, so an upgrade killed at any point resumes.
BACKFILL_RUNS = 200


def _add_totals_tables(conn: Connection) -> None:
    """The totals table (idempotent: re-run when an upgrade resumes)."""
    SQLModel.metadata.create_all(conn, tables=list(DERIVED))


def _add_ttft_check(conn: Connection) -> None:
    """Schema 11: the TTFT check column, and schema 12's count of calls
    that reported a cached count with it: this schema's backfill writes
    rows as ``totals_write.write`` does today (idempotent: re-run when an upgrade resumes)."""
    _add_totals_columns(conn, {"ttft_check": "INTEGER", "cached_reported": "INTEGER"})


def _add_cached_reported(conn: Connection) -> None:
    """Schema 12: the count of calls that reported a cached count
    (idempotent: re-run when an upgrade resumes)."""
    _add_totals_columns(conn, {"cached_reported": "INTEGER"})


def _backfill_cached_reported(engine: Engine, batch_runs: int | None = None) -> None:
    """Every run's totals computed again from its rows, now with how many of
    their calls reported a cached count (and digests over it), as
    ``_backfill_totals_digests`` does."""
    _rewrite_totals(engine, lambda marker: marker.c.cached_reported.is_(None), batch_runs)


def _add_totals_columns(conn: Connection, columns: Mapping[str, str]) -> None:
    have = {c["name"] for c in inspect(conn).get_columns(TOTALS.name)}
    for name, sql_type in columns.items():
        if name not in have:
            conn.exec_driver_sql(f"ALTER TABLE {TOTALS.name} ADD COLUMN {name} {sql_type}")


def _backfill_ttft_checks(engine: Engine, batch_runs: int | None = None) -> None:
    """Every run's totals computed again from its rows, now with their TTFT
    checks (and digests over them), as ``_backfill_totals_digests`` does."""
    _rewrite_totals(engine, lambda marker: marker.c.ttft_check.is_(None), batch_runs)


def _add_totals_digest(conn: Connection) -> None:
    """Schema 10: the digest column, and schema 11's TTFT check and schema
    12's cached count with it: this schema's backfill writes rows as
    ``write`` does today, with all three (idempotent: re-run when an upgrade resumes)."""
    _add_totals_columns(conn, {"digest": "VARCHAR", "ttft_check": "INTEGER", "cached_reported": "INTEGER"})


def _backfill_totals_digests(engine: Engine, batch_runs: int | None = None) -> None:
    """Every run's totals computed again from its rows, now with their digests,
    a batch of runs per transaction in id order, so an upgrade killed at any
    point resumes. Recomputed, not stamped as they are: totals altered before
    the upgrade are not vouched for by it."""
    _rewrite_totals(engine, lambda marker: marker.c.digest.is_(None), batch_runs)


def _rewrite_totals(engine: Engine, lacking: Any, batch_runs: int | None) -> None:
    """Recompute the totals of every run whose tool seconds row is ``lacking``
    a column, a batch of runs per transaction in id order (resumable)."""
    marker = TOTALS.alias("marker")
    undigested = exists().where(marker.c.run_id == RUNS.c.id, marker.c.own == 1, marker.c.model.is_(None),
                                lacking(marker))
    after = ""
    while True:
        with engine.begin() as conn:
            ids = list(conn.execute(select(RUNS.c.id).where(RUNS.c.id > after, undigested)
                                    .order_by(RUNS.c.id).limit(batch_runs or BACKFILL_RUNS)).scalars())
            if not ids:
                return
            totals_write.write(conn, ids)
            after = ids[-1]


def _backfill_totals(engine: Engine, batch_runs: int | None = None) -> None:
    """Totals for every finished run that has none, a batch of runs per
    transaction in id order, so an upgrade killed at any point resumes."""
    after = ""
    while True:
        with engine.begin() as conn:
            ids = list(conn.execute(
                select(RUNS.c.id).where(RUNS.c.id > after, RUNS.c.status == "finished", ~has_totals())
                .order_by(RUNS.c.id).limit(batch_runs or BACKFILL_RUNS)).scalars())
            if not ids:
                return
            totals_write.write(conn, ids, days=False)  # migration 9 builds the rollup from all of them
            after = ids[-1]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "runs, turns, model calls and responses, attempts, candidates, transitions, tool executions, events",
        _baseline,
    ),
    Migration(2, "indexes for listing runs, request look-up and reports", _listing_indexes),
    Migration(3, "covering index for aggregate reports", _report_indexes),
    Migration(4, "reasoning text and reasoning token columns on model responses", _reasoning_columns),
    Migration(5, "batches, batch tasks and attempts, run leases", _batch_tables),
    Migration(
        6,
        "content-addressed requests: blobs table, request columns by reference; deletions",
        content_migration.add_columns,
        content_migration.convert_requests,
    ),
    Migration(
        7,
        "the call's model copied onto responses and attempts, with covering indexes for aggregate reports",
        model_column.add_columns,
        model_column.backfill,
    ),
    Migration(
        8,
        "per-run totals for aggregate reports, written when a run finishes; backfilled for finished runs",
        _add_totals_tables,
        _backfill_totals,
    ),
    Migration(9, "the TTFT histogram of the runs with totals summed per day, for aggregate reports", ttft_days.rebuild),
    Migration(
        10,
        "a digest on each per-run totals row (the run's chain head, the row's key and figures), checked by reports",
        _add_totals_digest,
        _backfill_totals_digests,
    ),
    Migration(
        11,
        "a TTFT check on each per-run totals row (its buckets folded into one number, under the digest), with which "
        "reports check the TTFT rollups they sum",
        _add_ttft_check,
        _backfill_ttft_checks,
    ),
    Migration(
        12,
        "on each per-run totals row, how many of its calls reported a cached count (under the digest), so that "
        "aggregate reports show a cached figure no call reported as absent, not 0",
        _add_cached_reported,
        _backfill_cached_reported,
    ),
    Migration(13, "teacher scores: a teacher's logprob of every sampled id of a call, chained (escrow score)",
              _teacher_scores),
)
LATEST = MIGRATIONS[-1].version
if LATEST != schema_version.LATEST:  # one number, read by the light reader too
    raise RuntimeError(f"store.schema_version.LATEST is {schema_version.LATEST}, the last migration {LATEST}")


def store_tables() -> list[Table]:
    return [
        table_of(tables.Run), table_of(tables.Blob), table_of(tables.Deletion),
        *(table_of(model) for model in tables.CHAINED),
        *(table_of(model) for model in batch_tables.BATCH_TABLES),
        *run_totals.DERIVED,
        ttft_days.DAYS,
    ]


def current_version(conn: Connection) -> int | None:
    """The store's schema version, or None when it has no migration log."""
    if not inspect(conn).has_table(MIGRATION_LOG.name):
        return None
    return conn.execute(select(MIGRATION_LOG.c.version).order_by(MIGRATION_LOG.c.version.desc()).limit(1)).scalar() or 0


def create_latest(engine: Engine) -> None:
    with engine.begin() as conn:
        SQLModel.metadata.create_all(conn, tables=store_tables())
        MIGRATION_LOG.create(conn)
        _stamp(conn, MIGRATIONS)


def upgrade(engine: Engine, from_version: int, to_version: int = LATEST) -> list[int]:
    """Apply migrations above ``from_version`` up to ``to_version``; returns those applied."""
    applied = []
    for migration in MIGRATIONS:
        if from_version < migration.version <= to_version:
            with engine.begin() as conn:
                migration.apply(conn)
                if migration.backfill is None:
                    _stamp(conn, (migration,))
            if migration.backfill is not None:
                migration.backfill(engine)
                with engine.begin() as conn:
                    _stamp(conn, (migration,))
            applied.append(migration.version)
    return applied


def _stamp(conn: Connection, migrations: tuple[Migration, ...]) -> None:
    now = time.time()
    conn.execute(
        MIGRATION_LOG.insert(), [{"version": m.version, "name": m.name, "applied_at": now} for m in migrations]
    )
