"""Progress of long work on stderr (a replay's turns, a bundle's pages):
nothing for work done within ``after_s``; then, on a terminal, one line
redrawn in place, and in a pipe a line at each tenth of the work, so a log
shows it moving without a line per step. Stdout keeps the data."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from cli.display.table import terminal_width
from orchestrator.terminal_text import printable

AFTER_S = 2.0  # work shorter than this shows no progress


class StepProgress:
    def __init__(self, what: str, *, stream: TextIO | None = None, after_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what, self.stream, self.clock = what, stream or sys.stderr, clock
        self.after_s = AFTER_S if after_s is None else after_s
        self.started = clock()
        self.tenth_shown = -1
        self.drawn = False

    def step(self, done: int, total: int, name: str = "") -> None:
        if self.clock() - self.started < self.after_s:
            return
        line = f"{self.what}: {done}/{total}" + (f" {printable(name, newlines=False)}" if name else "")
        width = terminal_width()
        if self.stream.isatty():
            self.stream.write("\r" + line[:width - 1].ljust(width - 1))
            self.drawn = True
        else:
            tenth = done * 10 // max(total, 1)
            if tenth == self.tenth_shown:
                return
            self.tenth_shown = tenth
            self.stream.write(line[:width] + "\n")
        self.stream.flush()

    def done(self) -> None:
        """Clears a redrawn line, so what follows starts on a clean one."""
        if self.drawn:
            self.stream.write("\r" + " " * (terminal_width() - 1) + "\r")
            self.stream.flush()
            self.drawn = False
