"""How a run's sandbox runtime reads, in ``show`` and ``report``: light (a
report's usage error loads no store through it)."""

from __future__ import annotations

from cli.display.table import ABSENT
from orchestrator.terminal_text import one_line


def runtime_text(runtime: object) -> str:
    """A run's sandbox runtime; absent for runs recorded before it was."""
    if not isinstance(runtime, str):
        return ABSENT
    return one_line(runtime, 40) + (" (gVisor)" if runtime == "runsc" else "")
