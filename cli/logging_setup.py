"""structlog configuration for the CLI: human lines on stderr, or JSON lines
with ``--log-json``. Loggers are bound with run_id and turn by their callers."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(*, json_lines: bool, level: int = logging.INFO) -> None:
    renderer = structlog.processors.JSONRenderer() if json_lines else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,  # run_id, bound once the run is recorded
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # Resolve sys.stderr when a logger is made, not once: callers (and test
        # runners) swap it, and a captured stream may be closed later.
        logger_factory=lambda *args: structlog.PrintLogger(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
