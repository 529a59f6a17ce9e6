"""structlog configuration for the CLI: human lines on stderr (no timestamps:
a person reads them as they come), folded to the terminal's width (80 in a
pipe), or JSON lines with ``--log-json``. Loggers are bound with run_id and
turn by their callers."""

from __future__ import annotations

import logging
import sys

import structlog

from cli.display.table import terminal_width, wrapped
from orchestrator.terminal_text import printable


def configure_logging(*, json_lines: bool, level: int = logging.INFO) -> None:
    stamp = [structlog.processors.TimeStamper(fmt="iso", utc=True)] if json_lines else []
    # The human renderer escapes nothing: every value goes through printable()
    # so content quoted in a log line cannot drive the terminal.
    renderer = structlog.processors.JSONRenderer() if json_lines else _printable_console()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,  # run_id, bound once the run is recorded
            structlog.processors.add_log_level,
            *stamp,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # Resolve sys.stderr when a logger is made, not once: callers (and test
        # runners) swap it, and a captured stream may be closed later.
        logger_factory=lambda *args: structlog.PrintLogger(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def _printable_console():
    # pad_event_to=0: the event's 30-column pad wastes a third of a pipe's width.
    console = structlog.dev.ConsoleRenderer(colors=False, pad_event_to=0)

    def render(logger, name, event_dict):
        text = printable(console(logger, name, event_dict))
        width = terminal_width()
        return "\n".join(folded for line in text.splitlines()
                         for folded in wrapped(line, width, indent="    "))

    return render
