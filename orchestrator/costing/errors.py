"""Errors of cost reports and exports."""

from __future__ import annotations

from orchestrator.errors import EscrowError


class ReportError(EscrowError):
    """A report or export cannot be produced as asked."""

    exit_code = 8


class NothingToReport(ReportError):
    """The store (or the asked window) holds no runs to report on or export."""
