"""Typed errors of reading other agents' trajectories. Each carries the file
and an exit code of its own (``orchestrator.exit_codes``)."""

from __future__ import annotations

from typing import Any

from orchestrator.errors import EscrowError
from orchestrator.exit_codes import ExitCode


class SourceError(EscrowError):
    """Base: a source file cannot be imported."""

    exit_code = ExitCode.SOURCE_UNREADABLE


class UnreadableSource(SourceError):
    """Truncated, corrupted or not the structure its format promises."""

    exit_code = ExitCode.SOURCE_UNREADABLE


class FormatMismatch(SourceError):
    """The file is not in the format asked for, or in no format we read."""

    exit_code = ExitCode.SOURCE_FORMAT_MISMATCH


class UnsupportedVersion(SourceError):
    """The file declares a schema version this Escrow does not read."""

    exit_code = ExitCode.SOURCE_VERSION_UNSUPPORTED


class SourceTooLarge(SourceError):
    """Over a size cap: the file, a zip member, or a compression ratio (zip bomb)."""

    exit_code = ExitCode.SOURCE_TOO_LARGE


class NotReplayable(EscrowError):
    """An imported run: its requests were not built by Escrow's loop."""

    exit_code = ExitCode.NOT_REPLAYABLE


def not_replayable(run_id: str, config: dict[str, Any]) -> NotReplayable:
    found = config.get("import")
    source: dict[str, Any] = found if isinstance(found, dict) else {}
    return NotReplayable(
        f"run {run_id} was imported from {source.get('file', 'a file')}"
        f" ({source.get('format', 'another agent')} format); "
        "it cannot be replayed through Escrow's loop: replay rebuilds each request with Escrow's own loop, context and "
        "tools and compares it with the recorded one, but this run's requests were made by another agent, whose "
        "prompts, tools and sampling settings Escrow does not have. "
        "Use `escrow show`, `escrow report` or `escrow export`.",
        run_id=run_id,
    )
