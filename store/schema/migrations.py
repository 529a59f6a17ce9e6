"""Schema versions and the numbered migrations between them.

A new store is created at the latest schema from the table models and every
migration is stamped as applied. An existing store at version v gets the
migrations numbered above v, each in its own transaction, in order. A store
whose version is above ``LATEST`` was written by a newer Escrow and is refused.
Every migration is a numbered function here (``mNNN_...``; one with a
backfill has a second, named after what it fills); the history is
documented in docs/SCHEMA.md. A migration, once released, is never edited.

Over 400 lines: the schema's whole history is kept in this one file, as
simonw/llm keeps its, so that a reader finds every step in order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Index,
    MetaData,
    Table,
    and_,
    delete,
    exists,
    inspect,
    or_,
    select,
    text,
    true,
    update,
)
from sqlmodel import SQLModel

from orchestrator.canonical import canonical_json
from store.read import ttft_days
from store.read.run_totals import DERIVED, RUNS, TOTALS, has_totals
from store.schema import tables
from store.schema import version as schema_version
from store.schema.tables import MIGRATION_LOG, Blob, Deletion, ModelCall, table_of
from store.write import blobs, model_column, totals_write
from store.write.blobs import History


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


def m001_baseline(conn: Connection) -> None:
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


def _create_indexes(conn: Connection, specs: tuple[tuple[str, str, tuple[str, ...]], ...]) -> None:
    meta = MetaData()
    for table_name, index_name, columns in specs:
        table = Table(table_name, meta, autoload_with=conn)
        Index(index_name, *(table.c[c] for c in columns)).create(conn, checkfirst=True)


def m002_listing_indexes(conn: Connection) -> None:
    """Indexes behind ``escrow runs`` filters, request look-up by sha256 and reports."""
    _create_indexes(conn, V2_INDEXES)


def m003_report_indexes(conn: Connection) -> None:
    """A covering index for aggregate reports: usage and timings of a run's
    responses without reading their envelope rows."""
    _create_indexes(conn, V3_INDEXES)


def m004_reasoning_columns(conn: Connection) -> None:
    """The model's separated reasoning (``reasoning_content``/``reasoning``)
    and ``completion_tokens_details.reasoning_tokens`` with its convention."""
    for table_name, column, sql_type in V4_COLUMNS:
        if column not in {c["name"] for c in inspect(conn).get_columns(table_name)}:
            conn.exec_driver_sql(f'ALTER TABLE {table_name} ADD COLUMN "{column}" {sql_type}')


def m005_batch_tables(conn: Connection) -> None:
    """Batches, their tasks and attempts, and run leases. Self-contained (it only
    creates new tables), so it can be renumbered when migrations are merged."""
    SQLModel.metadata.create_all(conn, tables=[table_of(m) for m in tables.BATCH_TABLES])


# Migration 6, content-addressed requests: ``m006_content_addressed`` is
# idempotent and ``m006_convert_requests`` commits in batches, so an upgrade
# killed at any point resumes where it stopped. A converted row keeps its
# ``chain_hash``: its link was computed over the whole ``request_json``, so the
# row says ``request_hashed_as = 'request_json'`` and verify reassembles the
# text to check it. A row whose reassembly would not give its stored text byte
# for byte is left as it is.
CALLS: Table = table_of(ModelCall)
REQUEST_REF_COLUMNS = ("request_body", "request_refs", "request_hashed_as")
CONTENT_BATCH_ROWS = 200


def m006_content_addressed(conn: Connection) -> None:
    """The blobs and deletions tables and the request's reference columns (all nullable)."""
    table_of(Blob).create(conn, checkfirst=True)
    table_of(Deletion).create(conn, checkfirst=True)
    present = {c["name"] for c in inspect(conn).get_columns(CALLS.name)}
    for name in REQUEST_REF_COLUMNS:
        if name not in present:
            conn.execute(
                text(
                    f"ALTER TABLE {CALLS.name} ADD COLUMN {name} {'VARCHAR' if name == 'request_hashed_as' else 'TEXT'}"
                )
            )


def m006_convert_requests(engine: Engine, batch_rows: int | None = None) -> None:
    """Move every stored request text into blobs, a batch per transaction, in
    ``(run_id, seq)`` order so that a run's requests share their nodes."""
    limit = batch_rows or CONTENT_BATCH_ROWS
    histories: dict[str, History] = {}
    after: tuple[str, int] = ("", -1)
    while True:
        with engine.begin() as conn:
            rows = list(_unconverted_requests(conn, after, limit))
            if not rows:
                return
            for row in rows:
                converted = _converted_request(row, histories.get(row.run_id))
                if converted is None:
                    continue
                values, new_blobs, histories[row.run_id] = converted
                blobs.put(conn, new_blobs)
                conn.execute(update(CALLS).where(CALLS.c.id == row.id).values(**values))
            after = (rows[-1].run_id, rows[-1].seq)


def _unconverted_requests(conn: Connection, after: tuple[str, int], limit: int) -> Iterator[Any]:
    run_id, seq = after
    stmt = (
        select(CALLS.c.id, CALLS.c.run_id, CALLS.c.seq, CALLS.c.request_json)
        .where(
            CALLS.c.request_refs.is_(None),
            or_(CALLS.c.run_id > run_id, and_(CALLS.c.run_id == run_id, CALLS.c.seq > seq)),
        )
        .order_by(CALLS.c.run_id, CALLS.c.seq)
        .limit(limit)
    )
    yield from conn.execute(stmt)


def _converted_request(row: Any, previous: History | None) -> tuple[dict[str, Any], dict[str, str], History] | None:
    """The row's new columns and blobs; None when it stays as it is. Reassembly
    is ``canonical_json`` of the parsed parts, so it gives the stored text back
    exactly when that text is itself canonical JSON."""
    try:
        parsed = json.loads(row.request_json)
    except (TypeError, ValueError):
        return None
    if not isinstance(parsed, dict) or canonical_json(parsed) != row.request_json:
        return None
    parts = blobs.split(parsed, previous)
    if parts is None or parts.history is None:
        return None
    values = {
        "request_json": "",
        "request_body": parts.body,
        "request_refs": parts.refs,
        "request_hashed_as": blobs.HASHED_AS_TEXT,
    }
    return values, parts.blobs, parts.history


# Migration 7, the call's model copied onto responses and attempts
# (``store.write.model_column``): the backfill commits a batch per transaction in
# primary-key order, so an upgrade killed at any point resumes where it stopped.
MODEL_COPY_BATCH_ROWS = 5000


def m007_model_columns(conn: Connection) -> None:
    """The nullable copy columns (idempotent: re-run when an upgrade resumes)."""
    for table in model_column.TABLES:
        if model_column.MODEL not in {c["name"] for c in inspect(conn).get_columns(table.name)}:
            conn.exec_driver_sql(f'ALTER TABLE {table.name} ADD COLUMN "{model_column.MODEL}" VARCHAR')


def m007_copy_models(engine: Engine, batch_rows: int | None = None) -> None:
    """Copy each call's model onto its rows, a batch per transaction, then
    build the covering indexes (after, so the backfill does not maintain them)."""
    model = model_column.MODEL
    for table in model_column.TABLES:
        after = ""
        while True:
            with engine.begin() as conn:
                ids = list(conn.execute(
                    select(table.c.id).where(table.c.id > after).order_by(table.c.id)
                    .limit(batch_rows or MODEL_COPY_BATCH_ROWS)
                ).scalars())
                if not ids:
                    break
                of_call = select(CALLS.c[model]).where(CALLS.c.id == table.c.call_id).scalar_subquery()
                conn.execute(
                    update(table).where(table.c.id.in_(ids), table.c[model].is_(None)).values({model: of_call})
                )
                after = ids[-1]
    with engine.begin() as conn:
        meta = MetaData()
        for table in model_column.TABLES:
            reflected = Table(table.name, meta, autoload_with=conn)
            for index in table.indexes:
                if model in index.columns:
                    Index(index.name, *(reflected.c[c.name] for c in index.columns)).create(conn, checkfirst=True)


# Per-run totals (schemas 8, 10-12): each backfill recomputes a batch of runs per
# transaction in id order, so an upgrade killed at any point resumes.
BACKFILL_RUNS = 200


def m008_totals_tables(conn: Connection) -> None:
    """The totals table (idempotent: re-run when an upgrade resumes)."""
    SQLModel.metadata.create_all(conn, tables=list(DERIVED))


def m008_backfill_totals(engine: Engine, batch_runs: int | None = None) -> None:
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


def m009_ttft_days(conn: Connection) -> None:
    """The whole per-day TTFT rollup from ``run_ttfts`` (idempotent, one transaction)."""
    days = ttft_days.DAYS
    SQLModel.metadata.create_all(conn, tables=[days])
    conn.execute(delete(days))
    rows, _ = ttft_days.sums(conn, true())
    if rows:
        conn.execute(days.insert(), [{**dict(zip(ttft_days.KEY, k, strict=True)), "calls": n} for k, n in sorted(
            rows.items(), key=lambda kv: repr(kv[0]))])


def _add_totals_columns(conn: Connection, columns: Mapping[str, str]) -> None:
    have = {c["name"] for c in inspect(conn).get_columns(TOTALS.name)}
    for name, sql_type in columns.items():
        if name not in have:
            conn.exec_driver_sql(f"ALTER TABLE {TOTALS.name} ADD COLUMN {name} {sql_type}")


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


def m010_totals_digest(conn: Connection) -> None:
    """Schema 10: the digest column, and schema 11's TTFT check and schema
    12's cached count with it: this schema's backfill writes rows as
    ``totals_write.write`` does today, with all three (idempotent: re-run when an upgrade resumes)."""
    _add_totals_columns(conn, {"digest": "VARCHAR", "ttft_check": "INTEGER", "cached_reported": "INTEGER"})


def m010_backfill_digests(engine: Engine, batch_runs: int | None = None) -> None:
    """Every run's totals computed again from its rows, now with their digests,
    a batch of runs per transaction in id order, so an upgrade killed at any
    point resumes. Recomputed, not stamped as they are: totals altered before
    the upgrade are not vouched for by it."""
    _rewrite_totals(engine, lambda marker: marker.c.digest.is_(None), batch_runs)


def m011_ttft_check(conn: Connection) -> None:
    """Schema 11: the TTFT check column, and schema 12's count of calls
    that reported a cached count with it: this schema's backfill writes
    rows as ``totals_write.write`` does today (idempotent: re-run when an upgrade resumes)."""
    _add_totals_columns(conn, {"ttft_check": "INTEGER", "cached_reported": "INTEGER"})


def m011_backfill_ttft_checks(engine: Engine, batch_runs: int | None = None) -> None:
    """Every run's totals computed again from its rows, now with their TTFT
    checks (and digests over them), as ``m010_backfill_digests`` does."""
    _rewrite_totals(engine, lambda marker: marker.c.ttft_check.is_(None), batch_runs)


def m012_cached_reported(conn: Connection) -> None:
    """Schema 12: the count of calls that reported a cached count
    (idempotent: re-run when an upgrade resumes)."""
    _add_totals_columns(conn, {"cached_reported": "INTEGER"})


def m012_backfill_cached_reported(engine: Engine, batch_runs: int | None = None) -> None:
    """Every run's totals computed again from its rows, now with how many of
    their calls reported a cached count (and digests over it), as
    ``m010_backfill_digests`` does."""
    _rewrite_totals(engine, lambda marker: marker.c.cached_reported.is_(None), batch_runs)


def m013_teacher_scores(conn: Connection) -> None:
    """Self-contained (one new table), so it can be renumbered when migrations are merged."""
    SQLModel.metadata.create_all(conn, tables=[table_of(tables.TeacherScoreRow)])


def m014_teacher_top_k(conn: Connection) -> None:
    """Schema 14: the teacher's top K per sampled id on each score row
    (idempotent: re-run when an upgrade resumes). Old rows keep NULL, which
    the chain does not hash, so their links stay valid."""
    scores = table_of(tables.TeacherScoreRow).name
    if "top_json" not in {c["name"] for c in inspect(conn).get_columns(scores)}:
        conn.exec_driver_sql(f"ALTER TABLE {scores} ADD COLUMN top_json TEXT")


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "runs, turns, model calls and responses, attempts, candidates, transitions, tool executions, events",
        m001_baseline,
    ),
    Migration(2, "indexes for listing runs, request look-up and reports", m002_listing_indexes),
    Migration(3, "covering index for aggregate reports", m003_report_indexes),
    Migration(4, "reasoning text and reasoning token columns on model responses", m004_reasoning_columns),
    Migration(5, "batches, batch tasks and attempts, run leases", m005_batch_tables),
    Migration(
        6,
        "content-addressed requests: blobs table, request columns by reference; deletions",
        m006_content_addressed,
        m006_convert_requests,
    ),
    Migration(
        7,
        "the call's model copied onto responses and attempts, with covering indexes for aggregate reports",
        m007_model_columns,
        m007_copy_models,
    ),
    Migration(
        8,
        "per-run totals for aggregate reports, written when a run finishes; backfilled for finished runs",
        m008_totals_tables,
        m008_backfill_totals,
    ),
    Migration(9, "the TTFT histogram of the runs with totals summed per day, for aggregate reports", m009_ttft_days),
    Migration(
        10,
        "a digest on each per-run totals row (the run's chain head, the row's key and figures), checked by reports",
        m010_totals_digest,
        m010_backfill_digests,
    ),
    Migration(
        11,
        "a TTFT check on each per-run totals row (its buckets folded into one number, under the digest), with which "
        "reports check the TTFT rollups they sum",
        m011_ttft_check,
        m011_backfill_ttft_checks,
    ),
    Migration(
        12,
        "on each per-run totals row, how many of its calls reported a cached count (under the digest), so that "
        "aggregate reports show a cached figure no call reported as absent, not 0",
        m012_cached_reported,
        m012_backfill_cached_reported,
    ),
    Migration(13, "teacher scores: a teacher's logprob of every sampled id of a call, chained (escrow score)",
              m013_teacher_scores),
    Migration(14, "the teacher's top K (ids and logprobs) per sampled id on each teacher score row",
              m014_teacher_top_k),
)
LATEST = MIGRATIONS[-1].version
if LATEST != schema_version.LATEST:  # one number, read by the light reader too
    raise RuntimeError(f"store.schema.version.LATEST is {schema_version.LATEST}, the last migration {LATEST}")


def store_tables() -> list[Table]:
    return [
        table_of(tables.Run), table_of(tables.Blob), table_of(tables.Deletion),
        *(table_of(model) for model in tables.CHAINED),
        *(table_of(model) for model in tables.BATCH_TABLES),
        *DERIVED,
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
