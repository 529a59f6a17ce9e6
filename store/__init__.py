"""Escrow's trajectory store: write-ahead recording of runs into SQLite (or
PostgreSQL), a per-run hash chain, and frozen read views. The schema is a
public interface, documented in docs/SCHEMA.md."""

from orchestrator.trajectory import (
    AttemptView,
    CallView,
    CandidateView,
    EventView,
    ResponseView,
    RunSummary,
    RunTotals,
    RunView,
    ToolExecutionView,
    Trajectory,
    TransitionView,
    TurnRecord,
    TurnView,
)
from store.chain import ChainCheck
from store.errors import (
    ChainBroken,
    NotAStore,
    RecordingError,
    RunNotFound,
    SchemaTooNew,
    SchemaTooOld,
    StoreError,
    StoreNotFound,
)
from store.journal import RunJournal
from store.migrations import LATEST as SCHEMA_VERSION
from store.recorder import Recorder, TurnWriter
from store.store import Store

__all__ = [
    "AttemptView", "CallView", "CandidateView", "ChainBroken", "ChainCheck", "EventView", "NotAStore",
    "RecordingError", "Recorder", "ResponseView", "RunJournal", "RunNotFound", "RunSummary", "RunTotals", "RunView",
    "SCHEMA_VERSION", "SchemaTooNew", "SchemaTooOld", "Store", "StoreError", "StoreNotFound", "ToolExecutionView",
    "Trajectory", "TransitionView", "TurnRecord", "TurnView", "TurnWriter",
]
