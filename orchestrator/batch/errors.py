"""Typed errors of batch runs (exit code 2: the user can fix them; 3: the
store went away)."""

from __future__ import annotations

from orchestrator.errors import EscrowError
from orchestrator.exit_codes import ExitCode


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
    """No batch with that id in the store."""


class RayUnavailable(EscrowError):
    """``--executor ray`` cannot be used: Ray is not installed, the cluster
    at the address does not answer, or the store is not one every node reaches."""


class StoreLost(EscrowError):
    """The store went away in the middle of a batch; what was recorded stands
    and ``escrow batch --resume`` finishes the batch once the store is back."""

    exit_code = ExitCode.STORE_MISSING

