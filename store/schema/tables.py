"""The store's tables, as SQLModel classes: the public schema (docs/SCHEMA.md).

Every table but ``runs`` and the derived ones at the end (per-run totals,
their TTFT buckets, the per-day rollup) is append-only and part of its run's
hash chain: it carries ``run_id``, a per-run sequence number ``seq`` shared
by all chained tables, and ``chain_hash``; the batch tables and the
migration log are bookkeeping, outside any chain. Every table of a store is
here. Columns are named after OpenTelemetry GenAI
attributes where one fits; the Python attribute keeps a plain name. JSON is
stored as canonical text (not a JSON type) so the hashed bytes are the stored
bytes on every backend. Timestamps are Unix seconds (REAL).

The DDL that migrates older stores to these tables lives in
``store.schema.migrations``; tests keep the two, and docs/SCHEMA.md's tables
section, in step with the models.

Over 400 lines: every table model is in this one module, so that the schema
is read in one place (and docs/SCHEMA.md generated from it).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Float, Index, Integer, MetaData, String, Table, Text, UniqueConstraint
from sqlalchemy import inspect as sa_inspect
from sqlmodel import Field, SQLModel

from store.text_escape import EscapedString, EscapedText


def otel(name: str, **kwargs: Any) -> Any:
    """A column named after an OpenTelemetry attribute."""
    return Field(sa_column_kwargs={"name": name}, **kwargs)


def text(**kwargs: Any) -> Any:
    """Free text, escaped where PostgreSQL could not hold it (store.text_escape)."""
    return Field(sa_type=EscapedText, **kwargs)


def outside(**kwargs: Any) -> Any:
    """A short text from outside Escrow (a model, a server, a tool): escaped alike."""
    return Field(sa_type=EscapedString, **kwargs)


def table_of(model: type[SQLModel]) -> Table:
    """The Core table of a table model. SQLAlchemy sets ``__table__`` on every
    ``table=True`` class; SQLModel's types do not declare it, so it is read
    through the mapper."""
    table = sa_inspect(model).local_table
    if not isinstance(table, Table):
        raise TypeError(f"{model.__name__} is not mapped to a table")
    return table


class Run(SQLModel, table=True):
    __tablename__ = "runs"
    # Filters of `escrow runs` are followed by the newest-first order, so the
    # sort is read off the index rather than done in a temporary B-tree.
    __table_args__ = (
        Index("ix_runs_created_at", "created_at"),
        Index("ix_runs_status", "status", "created_at"),
        Index("ix_runs_verdict", "verdict", "created_at"),
        Index("ix_runs_model", "gen_ai.request.model", "created_at"),
    )

    id: str = Field(primary_key=True)
    created_at: float
    finished_at: float | None = None
    task: str = text()
    repo: str = outside()
    mode: str
    request_model: str = otel("gen_ai.request.model", sa_type=EscapedString)
    config_json: str = text()
    policy_json: str = text()
    parent_run_id: str | None = Field(default=None, foreign_key="runs.id")
    forked_at_turn: int | None = None
    escrow_version: str
    status: str
    verdict: str | None = None
    verdict_detail: str | None = text(default=None)
    chain_seq: int
    chain_head: str


class Chained(SQLModel):
    """Columns shared by every chained row."""

    id: str = Field(primary_key=True)
    run_id: str = Field(foreign_key="runs.id")
    seq: int
    chain_hash: str
    turn: int | None = None


def chained_args(table: str, *extra: Any) -> tuple[Any, ...]:
    return (UniqueConstraint("run_id", "seq", name=f"uq_{table}_run_seq"), *extra)


class Turn(Chained, table=True):
    """Written last in a turn's transaction: its presence means the turn committed."""

    __tablename__ = "turns"
    __table_args__ = chained_args("turns", UniqueConstraint("run_id", "turn", name="uq_turns_run_turn"))

    committed_at: float
    n_rows: int
    messages_json: str = text()


class ModelCall(Chained, table=True):
    """The request, committed before the call is made (write-ahead)."""

    __tablename__ = "model_calls"
    __table_args__ = chained_args("model_calls", Index("ix_model_calls_run_turn", "run_id", "turn"))

    created_at: float
    attempt_of: str | None = Field(default=None, foreign_key="model_calls.id")
    operation_name: str = otel("gen_ai.operation.name")
    request_model: str = otel("gen_ai.request.model", sa_type=EscapedString)
    max_tokens: int = otel("gen_ai.request.max_tokens")
    temperature: float | None = otel("gen_ai.request.temperature", default=None)
    top_p: float | None = otel("gen_ai.request.top_p", default=None)
    top_k: int | None = otel("gen_ai.request.top_k", default=None)
    seed: int | None = otel("gen_ai.request.seed", default=None)
    stop_sequences: str = otel("gen_ai.request.stop_sequences", sa_type=EscapedText)
    sampling_json: str = text()
    deadline_s: float
    max_payload_bytes: int
    # Schema 4 stores the request by reference (store.write.blobs): ``request_json``
    # is '' and the text is reassembled from ``request_body`` and the blobs
    # named in ``request_refs``. Rows written before keep their text or, once
    # converted, say in ``request_hashed_as`` that their link covers it.
    request_json: str = text()
    request_sha256: str = Field(index=True)
    request_body: str | None = text(default=None)
    request_refs: str | None = text(default=None)
    request_hashed_as: str | None = None


class Blob(SQLModel, table=True):
    """A message, tools list or message-list node, stored once for every run
    that uses it; ``sha256`` is the hash of ``body`` (UTF-8)."""

    __tablename__ = "blobs"

    sha256: str = Field(primary_key=True)
    body: str = text()


class Deletion(SQLModel, table=True):
    """A run removed by ``escrow gc``: what it was and the chain head it had,
    so its absence is accounted for."""

    __tablename__ = "deletions"

    run_id: str = Field(primary_key=True)
    created_at: float
    deleted_at: float
    verdict: str | None = None
    chain_seq: int
    chain_head: str
    reason: str = text()


class ModelResponse(Chained, table=True):
    """The envelope of one call, recorded after it returned."""

    __tablename__ = "model_responses"
    __table_args__ = chained_args(
        "model_responses",
        # Covering: aggregate reports sum usage and timings without reading envelope rows.
        Index(
            "ix_model_responses_usage", "run_id", "call_id", "gen_ai.usage.input_tokens",
            "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.output_tokens", "total_s", "decode_s",
            "ttft_s", "n_attempts",
        ),
        # Schema 7, covering the aggregates by (run, model) with no join to model_calls.
        Index(
            "ix_model_responses_run_model", "run_id", "gen_ai.request.model", "turn", "gen_ai.usage.input_tokens",
            "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.output_tokens", "total_s", "decode_s",
            "n_attempts", "ttft_s",
        ),
    )

    call_id: str = Field(foreign_key="model_calls.id", unique=True)
    recorded_at: float
    status: str = Field(index=True)
    finish_reasons: str | None = otel("gen_ai.response.finish_reasons", default=None, sa_type=EscapedText)
    http_status: int | None = None
    response_model: str | None = otel("gen_ai.response.model", default=None, sa_type=EscapedString)
    system_fingerprint: str | None = otel("openai.response.system_fingerprint", default=None, sa_type=EscapedString)
    engine: str | None = outside(default=None)
    input_tokens: int = otel("gen_ai.usage.input_tokens")
    cached_input_tokens: int = otel("gen_ai.usage.cache_read.input_tokens")
    output_tokens: int = otel("gen_ai.usage.output_tokens")
    input_tokens_source: str
    cached_input_tokens_source: str
    output_tokens_source: str
    ttft_s: float | None = None
    decode_s: float | None = None
    total_s: float
    cost_usd: float | None = None
    payload_bytes: int
    error_type: str | None = otel("error.type", default=None)
    error_message: str | None = text(default=None)
    n_attempts: int
    envelope_json: str = text()
    envelope_sha256: str
    # Schema 4: the engine's separated reasoning and its token count.
    reasoning: str | None = text(default=None)
    reasoning_tokens: int | None = None
    reasoning_convention: str | None = None
    # Schema 7: the call's requested model, copied for reports (not hashed; verified against the call).
    call_model: str | None = otel("gen_ai.request.model", default=None, sa_type=EscapedString)


class CallAttempt(Chained, table=True):
    """One HTTP attempt inside a call (the client's own retries)."""

    __tablename__ = "call_attempts"
    __table_args__ = chained_args(
        "call_attempts", UniqueConstraint("call_id", "number", name="uq_call_attempts_number"),
        Index("ix_call_attempts_run_model", "run_id", "gen_ai.request.model", "turn", "duration_s", "backoff_s"),
    )

    call_id: str = Field(foreign_key="model_calls.id")
    number: int
    status: str
    http_status: int | None = None
    error_type: str | None = otel("error.type", default=None)
    error_message: str | None = text(default=None)
    duration_s: float
    backoff_s: float
    # Schema 7: the call's requested model, copied for reports (not hashed; verified against the call).
    call_model: str | None = otel("gen_ai.request.model", default=None, sa_type=EscapedString)


class CandidateRow(Chained, table=True):
    """A tool call the model proposed, as it entered escrow."""

    __tablename__ = "candidates"
    __table_args__ = chained_args(
        "candidates", UniqueConstraint("call_id", "candidate_index", name="uq_candidates_call_index")
    )

    call_id: str = Field(foreign_key="model_calls.id")
    candidate_index: int
    tool_call_id: str | None = otel("gen_ai.tool.call.id", default=None, sa_type=EscapedString)
    tool_name: str | None = otel("gen_ai.tool.name", default=None, sa_type=EscapedString)
    tool_call_json: str = text()
    created_at: float


class TransitionRow(Chained, table=True):
    """One escrow state change of a candidate; ``from_state`` is NULL on staging."""

    __tablename__ = "escrow_transitions"
    __table_args__ = chained_args("escrow_transitions", Index("ix_escrow_transitions_candidate", "candidate_id"))

    candidate_id: str = Field(foreign_key="candidates.id")
    from_state: str | None = None
    to_state: str
    layer: str | None = None
    reason: str = text()
    at: float


class ToolExecution(Chained, table=True):
    """The ACL decision on a candidate and, if allowed, its execution.
    ``observation`` is the exact text fed back to the model."""

    __tablename__ = "tool_executions"
    __table_args__ = chained_args("tool_executions", Index("ix_tool_executions_candidate", "candidate_id"))

    candidate_id: str = Field(foreign_key="candidates.id")
    tool_name: str = otel("gen_ai.tool.name", sa_type=EscapedString)
    arguments_json: str | None = otel("gen_ai.tool.call.arguments", default=None, sa_type=EscapedText)
    decision: str | None = None
    rule: str | None = None
    reason: str | None = text(default=None)
    ok: int | None = None
    exit_code: int | None = None
    stdout: str = text()
    stdout_bytes: int
    stdout_sha256: str
    stderr: str = text()
    stderr_bytes: int
    stderr_sha256: str
    duration_s: float | None = None
    observation: str = otel("gen_ai.tool.call.result", sa_type=EscapedText)
    observation_sha256: str
    detail_json: str | None = text(default=None)
    at: float


class EventRow(Chained, table=True):
    """Compaction, budget, cancel, routing, verdict and other run events."""

    __tablename__ = "events"
    __table_args__ = chained_args("events", Index("ix_events_kind", "kind"))

    kind: str
    data_json: str = text()
    at: float


class TeacherScoreRow(Chained, table=True):
    """A teacher's logprob of every id a call sampled (``escrow score``,
    schema 13), and its top K at each (schema 14): appended to the run's
    chain after the run, one row a call, teacher model and K."""

    __tablename__ = "teacher_scores"
    __table_args__ = chained_args("teacher_scores", Index("ix_teacher_scores_call", "call_id", "teacher_model"))

    call_id: str = Field(foreign_key="model_calls.id")
    teacher_model: str = outside()
    teacher_engine: str = outside()
    top_k: int
    request_sha256: str
    n_tokens: int
    logprobs_json: str = text()
    in_top_k_json: str = text()
    duration_s: float | None = None
    at: float
    # Per sampled id, [[id, logprob], ...] of the teacher's top K, best first
    # (schema 14); NULL where the engine names its top K by text, not id
    # (llama-cpp-python), and in rows written before schema 14, whose links
    # then stay valid (NULL columns are not hashed).
    top_json: str | None = text(default=None)


CHAINED: tuple[type[Chained], ...] = (
    Turn, ModelCall, ModelResponse, CallAttempt, CandidateRow, TransitionRow, ToolExecution, EventRow,
    TeacherScoreRow,
)
CHAINED_TABLES: tuple[str, ...] = tuple(table_of(model).name for model in CHAINED)


# Derived tables (schemas 8 and 9): computed from a run's chained rows, never
# chained themselves; written by ``store.write.totals_write``, checked by verify.

class RunTotal(SQLModel, table=True):
    """Per-run totals for aggregate reports (``store.read.run_totals``)."""

    __tablename__ = "run_totals"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id", index=True)
    own: int
    model: str | None = outside(default=None)
    engine: str | None = outside(default=None)
    calls: int
    prompt_tokens: int
    cached_tokens: int
    cached_reported: int | None = None
    """How many of the row's calls carried a cached count (schema 12): with
    none, ``cached_tokens`` is absent, not 0."""
    output_tokens: int
    direct_s: float
    http_s: float
    wait_s: float
    decode_s: float
    retries: int
    ttft_check: int | None = None
    """The row's TTFT buckets folded into one number (``ttft_buckets.ttft_check``), so the
    TTFT rollups a report sums can be checked against the digested totals
    of the runs they sum (schema 11)."""
    tool_s: float
    digest: str | None = None
    """sha256 of the run's chain head when the row was computed, the row's
    key and figures (``digest``): checked by every report that reads the row."""


class RunTtft(SQLModel, table=True):
    """How many of a totals row's calls had their TTFT in one bucket."""

    __tablename__ = "run_ttfts"
    # Covering: a report sums a window's buckets without reading the table's rows.
    __table_args__ = (Index("ix_run_ttfts_run", "run_id", "own", "model", "engine", "bucket_ms", "calls"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id")
    own: int
    model: str | None = outside(default=None)
    engine: str | None = outside(default=None)
    bucket_ms: int
    calls: int


class TtftDay(SQLModel, table=True):
    """The runs' TTFT buckets summed per day they started (``store.read.ttft_days``)."""

    __tablename__ = "ttft_days"
    # Covering: a report sums whole days without reading the table's rows.
    __table_args__ = (Index("ix_ttft_days_key", "day", "replay", "own", "model", "engine", "bucket_ms", "calls"),)

    id: int | None = Field(default=None, primary_key=True)
    day: int
    replay: int
    own: int
    model: str | None = outside(default=None)
    engine: str | None = outside(default=None)
    bucket_ms: int
    calls: int


# Batch runs and run leases (schema 5): not part of any hash chain, since a
# batch is bookkeeping over runs and each run keeps its own chain.
# ``batch_attempts`` is append-only, one row per try of a task; a task's
# outcome is its latest attempt.


class BatchRow(SQLModel, table=True):
    __tablename__ = "batches"

    id: str = Field(primary_key=True)
    created_at: float
    task_file: str
    n_tasks: int
    settings_json: str = Field(sa_type=Text)


class BatchTaskRow(SQLModel, table=True):
    """One task of a batch, as its row was parsed (the task file may change later)."""

    __tablename__ = "batch_tasks"

    batch_id: str = Field(primary_key=True, foreign_key="batches.id")
    task_id: str = Field(primary_key=True)
    line: int
    task_json: str = Field(sa_type=Text)


ATTEMPT_STARTED = "started"
"""An attempt's ``outcome`` while it is in flight (or after its process died)."""


class BatchAttemptRow(SQLModel, table=True):
    """One try of a task. ``outcome`` is ``model`` (the run's verdict counts),
    ``infrastructure`` (retried, never a model failure) or ``started`` (in flight,
    or its process died)."""

    __tablename__ = "batch_attempts"
    __table_args__ = (Index("ix_batch_attempts_task", "batch_id", "task_id", "number"),)

    id: str = Field(primary_key=True)
    batch_id: str = Field(foreign_key="batches.id")
    task_id: str
    number: int
    run_id: str | None = None
    outcome: str
    verdict: str | None = None
    error: str | None = Field(default=None, sa_type=Text)
    replica: str | None = None
    started_at: float
    finished_at: float | None = None


class RunLease(SQLModel, table=True):
    """A live process's claim on a running run, renewed by heartbeat. A run
    still ``running`` whose lease expired belongs to a process that died."""

    __tablename__ = "run_leases"

    run_id: str = Field(primary_key=True)
    owner: str
    heartbeat_at: float
    expires_at: float


BATCH_TABLES = (BatchRow, BatchTaskRow, BatchAttemptRow, RunLease)


# The migration log: one row per applied migration (store.schema.migrations). Its own
# metadata, so that creating the models' tables never creates it.
migration_log_metadata = MetaData()
MIGRATION_LOG = Table(
    "escrow_migrations",
    migration_log_metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("name", String, nullable=False),
    Column("applied_at", Float, nullable=False),
)
