"""Escrow's trajectory store: write-ahead recording of runs into SQLite (or
PostgreSQL), a per-run hash chain, and frozen read views. The schema is a
public interface, documented in docs/SCHEMA.md.

The public names are imported on first use (PEP 562), so that importing a
light module of the package (``store.read.run_list``, for ``escrow runs``) does
not load SQLAlchemy and the table models."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from store.schema.version import LATEST as SCHEMA_VERSION
    from store.store import Store
    from store.write.journal import RunJournal
    from store.write.recorder import Recorder, TurnWriter

_HOMES: dict[str, tuple[str, str]] = {
    **{name: ("orchestrator.trajectory", name) for name in (
        "AttemptView", "CallView", "CandidateView", "EventView", "ResponseView", "RunSummary", "RunTotals",
        "RunView", "ToolExecutionView", "Trajectory", "TransitionView", "TurnRecord", "TurnView")},
    **{name: ("store.errors", name) for name in (
        "ChainBroken", "NotAStore", "RecordingError", "RunNotFound", "SchemaTooNew", "SchemaTooOld", "StoreError",
        "StoreNotFound")},
    "ChainCheck": ("store.chain", "ChainCheck"),
    "RunJournal": ("store.write.journal", "RunJournal"),
    "Recorder": ("store.write.recorder", "Recorder"),
    "TurnWriter": ("store.write.recorder", "TurnWriter"),
    "SCHEMA_VERSION": ("store.schema.version", "LATEST"),
    "Store": ("store.store", "Store"),
}

__all__ = [
    "AttemptView", "CallView", "CandidateView", "ChainBroken", "ChainCheck", "EventView", "NotAStore",
    "RecordingError", "Recorder", "ResponseView", "RunJournal", "RunNotFound", "RunSummary", "RunTotals", "RunView",
    "SCHEMA_VERSION", "SchemaTooNew", "SchemaTooOld", "Store", "StoreError", "StoreNotFound", "ToolExecutionView",
    "Trajectory", "TransitionView", "TurnRecord", "TurnView", "TurnWriter",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'store' has no attribute {name!r}")
    value = getattr(import_module(home[0]), home[1])
    globals()[name] = value
    return value
