"""structlog configuration for the CLI: human lines on stderr (no timestamps:
a person reads them as they come), folded to the terminal's width (80 in a
pipe), or JSON lines with ``--log-json``. Loggers are bound with run_id and
turn by their callers.

A human line is a notice in the display's own style, not a structured log
record: ``sandbox runtime · runtime runsc · why auto: ...``, a warning
``warning: model has no price ...``; no level column, no ``key=value``
quoting (the structured form is ``--log-json``'s)."""

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


def notice(event_dict: dict) -> str:
    """An event as a person reads it: its words, then each value after its name."""
    values = dict(event_dict)
    level = str(values.pop("level", "info"))
    values.pop("timestamp", None)
    head = str(values.pop("event", ""))
    if level not in ("info", "debug"):
        head = f"{level}: {head}"
    return " · ".join([head, *(f"{key} {value}" for key, value in values.items())])


def _printable_console():
    def render(logger, name, event_dict):
        text = printable(notice(event_dict))
        width = terminal_width()
        return "\n".join(folded for line in text.splitlines()
                         for folded in wrapped(line, width, indent="    "))

    return render
