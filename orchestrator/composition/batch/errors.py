"""Typed errors of batch runs (exit code 2: the user can fix them; 3, as
any store error: the store went away; 130: Ctrl-C)."""

from __future__ import annotations

from orchestrator.errors import EscrowError
from orchestrator.exit_codes import ExitCode
from store.errors import StoreError


class TaskFileError(EscrowError):
    """A task file cannot be used at all: unreadable, or ids repeated."""


class TaskRowError(EscrowError):
    """One row of a task file is malformed; the other rows still run."""

    def __init__(self, message: str, *, line: int, **context: object) -> None:
        super().__init__(f"line {line}: {message}", line=line, **context)
        self.line = line


class RepoError(EscrowError):
    """A task's repository cannot be materialised at its commit."""


class BatchNotFound(EscrowError):
    """No batch with that id in the store, or the prefix is ambiguous (the
    exit code of a run not found: one code for "no such id")."""

    exit_code = ExitCode.RUN_NOT_FOUND


class RayUnavailable(EscrowError):
    """``--executor ray`` cannot be used: Ray is not installed, the cluster
    at the address does not answer, or the store is not one every node reaches."""


class StoreLost(StoreError):
    """The store went away during a batch (exit code 3, as any store error):
    the batch stops; ``escrow batch --resume BATCH`` finishes it once the store
    is back, rerunning only the tasks without a model verdict."""


class BatchInterrupted(EscrowError):
    """Ctrl-C stopped the batch (exit code 130): its runs in flight ended
    CANCELED and their attempts read ``interrupted``; ``escrow batch --resume
    BATCH`` reruns every task without a model verdict."""

    exit_code = ExitCode.INTERRUPTED
