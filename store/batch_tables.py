"""Tables of batch runs and run leases (schema version 4, docs/SCHEMA.md).

Not part of any hash chain: a batch is bookkeeping over runs, and each run keeps
its own chain. ``batch_attempts`` is append-only, one row per try of a task;
a task's outcome is its latest attempt.
"""

from __future__ import annotations

from sqlalchemy import Index, Text
from sqlmodel import Field, SQLModel


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
