"""Typed store errors. Each carries the store location and an exit code the
CLI uses, so a bad file ends in one clear line, never a traceback."""

from __future__ import annotations

from orchestrator.errors import EscrowError


class StoreError(EscrowError):
    """Base of every store failure."""

    exit_code = 3


class StoreNotFound(StoreError):
    """The store file does not exist and was not to be created."""

    exit_code = 3


class NotAStore(StoreError):
    """The file is not SQLite, is truncated or corrupt, or holds a foreign schema."""

    exit_code = 4


class SchemaTooNew(StoreError):
    """The store was written by a newer Escrow; this one will not touch it."""

    exit_code = 5


class SchemaTooOld(StoreError):
    """A read-only open found a store that needs migrating first."""

    exit_code = 5


class RunNotFound(StoreError):
    """No run matches the given id or prefix, or the prefix is ambiguous."""

    exit_code = 6


class RecordingError(StoreError):
    """A write that would make the record inconsistent (unknown call, illegal
    transition, a turn recorded twice)."""

    exit_code = 7


class ChainBroken(StoreError):
    """``verify`` found a broken link in a run's hash chain."""

    exit_code = 1


class StoreDamaged(NotAStore):
    """A page or a cell of the store is damaged: SQLite reports corruption, or
    a cell holds a value its column cannot (a BLOB in a text column, text in
    a REAL one). Same exit code as any other unreadable store."""
