"""Issue 42, group 13 (part): first-run text speaks the user's words. The
help of run, call, batch and replay names no K_max, S_max or T_max (the
design's symbols), and an unknown context window names the flag that gives
it, not a setting's name."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.context.budget import resolve_budget
from orchestrator.errors import ConfigError


@pytest.mark.parametrize("command", ["run", "call", "batch", "replay"])
def test_help_speaks_without_symbols(command: str) -> None:
    shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0 and not re.search(r"\b[KST]_max\b", shown.stdout), shown.stdout


def test_an_unknown_context_window_names_the_flag() -> None:
    with pytest.raises(ConfigError, match="--context-window"):
        resolve_budget(configured=None, discovered=None, k_max=512)
