"""What running one command or file operation in the sandbox takes and gives:
its limits and its outcome, as data. The executor (``sandbox.executor``)
enforces the limits inside the container; the host enforces them again on
what it receives."""

from __future__ import annotations

from typing import Any

from orchestrator.contract import Captured, Frozen

FLOOD_FACTOR = 4096  # a command is killed past this many times its caps (bounded host CPU)


class ExecLimits(Frozen):
    timeout_s: float
    stdout_cap: int
    stderr_cap: int


# The host's own steps in a container (copying in, refilling, exporting),
# never the model's commands.
SETUP_LIMITS = ExecLimits(timeout_s=120, stdout_cap=4096, stderr_cap=4096)


class ExecOutcome(Frozen):
    exit_code: int | None
    stdout: Captured
    stderr: Captured
    duration_s: float
    timed_out: bool
    flooded: bool
    canceled: bool = False


class FileOpOutcome(Frozen):
    """A file operation's reply (None when it timed out or was canceled)."""

    reply: dict[str, Any] | None
    duration_s: float
    timed_out: bool = False
    canceled: bool = False
