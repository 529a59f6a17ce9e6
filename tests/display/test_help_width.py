"""Every ``--help`` reads well at 80 columns: no line is wider than the
terminal, and every description column keeps at least 30 characters."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cli.main import app

ESCROW = Path(sys.executable).parent / "escrow"
WIDTH = 80
MIN_DESCRIPTION = 30
# "  --name <metavar>   Description...": the description starts after a gap of 2+ spaces.
_ENTRY = re.compile(r"^( {1,5}\S.*?\S?)( {2,})(\S.*)$")
_CONTINUATION = re.compile(r"^( {6,})\S")


def command_paths(command, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path under ``command`` (typer carries its own click)."""
    paths = [prefix]
    if hasattr(command, "list_commands"):
        ctx = command.context_class(command)
        for name in command.list_commands(ctx):
            paths += command_paths(command.get_command(ctx, name), (*prefix, name))
    return paths


ALL = command_paths(typer.main.get_command(app))


def description_columns(text: str) -> list[tuple[int, str]]:
    """(width left for the description, line) for each option, argument or
    command entry and each wrapped continuation of one."""
    found = []
    section = False
    for line in text.splitlines():
        if re.match(r"^[A-Z][A-Za-z ]*:$", line) or line.startswith("╭─"):  # click's or rich's panels
            section = True
            continue
        line = line.replace("│", " ").rstrip()
        if not section or not line.strip():
            continue
        cont = _CONTINUATION.match(line)  # deep indent: a wrapped description
        if cont:
            found.append((WIDTH - len(cont.group(1)), line))
            continue
        entry = _ENTRY.match(line)
        if entry:
            found.append((WIDTH - entry.start(3), line))
    return found


def test_the_measure_catches_a_squeezed_column():
    squeezed = (
        "Options:\n"
        "  --a-very-long-option-name-indeed <text>            Two\n"
        "                                                     words\n"
    )
    assert [w for w, _ in description_columns(squeezed)] == [WIDTH - 53, WIDTH - 53]
    assert min(w for w, _ in description_columns(squeezed)) < MIN_DESCRIPTION


def test_every_command_is_measured():
    names = {" ".join(p) for p in ALL}
    assert {"", "run", "show", "runs", "replay", "verify-patch", "report", "sandbox build",
            "sandbox doctor"} <= names
    assert len(ALL) >= 15


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "escrow")
def test_help_at_80_columns_keeps_descriptions_readable(path):
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH)})
    assert result.exit_code == 0, result.output
    text = result.output
    assert max(len(line) for line in text.splitlines()) <= WIDTH, text
    columns = description_columns(text)
    assert columns, text
    narrow = [(w, line) for w, line in columns if w < MIN_DESCRIPTION]
    assert not narrow, "\n".join(line for _, line in narrow)


def test_the_installed_command_at_80_columns():
    env = {**os.environ, "COLUMNS": str(WIDTH)}
    for args in (["--help"], ["run", "--help"], ["show", "--help"]):
        done = subprocess.run([str(ESCROW), *args], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert max(len(line) for line in done.stdout.splitlines()) <= WIDTH
        assert min(w for w, _ in description_columns(done.stdout)) >= MIN_DESCRIPTION, done.stdout


@pytest.mark.parametrize("path", ALL, ids=lambda p: " ".join(p) or "escrow")
def test_usage_lines_read_in_the_conventional_forms(path):
    """TASK, [RUN]... and FILES..., never typer's {task}, [[RUN]...]... or <list[str]>."""
    text = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)}).output
    usage = text.splitlines()[0]
    assert usage.startswith("Usage: escrow"), text
    assert "{" not in usage and "[[" not in usage, usage
    assert "<list[" not in text, text
    arguments = re.findall(r"^Arguments:\n((?:  .*\n?)+)", text, re.M)
    for entry in arguments[0].splitlines() if arguments else []:
        if not entry.startswith("   "):  # an entry, not its wrapped description
            name = entry.split()[0]
            assert name == name.upper(), entry  # NAME, not name


@pytest.mark.parametrize(("path", "option", "shown"), [
    (("report",), "--by", "<model|day|status|verdict|engine|source|batch>"),
    (("runs",), "--status", "<running|crashed|finished>"),
    (("export",), "--format", "<messages-jsonl|events-jsonl|atif|otel|rollout>"),
    (("export",), "--shape", "<flat|trl|verl|atif>"),
    (("batch",), "--executor", "<local|ray>"),
    (("run",), "--tool-protocol", "<native|text>"),
])
def test_options_with_fixed_values_list_them(path, option, shown):
    text = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)}).output
    assert f"{option} {shown}" in text, text


@pytest.mark.parametrize("view", ["status", "report", "list"])
def test_a_batch_views_help_is_its_own(view):
    result = CliRunner().invoke(app, ["batch", view, "--help"], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: escrow batch {view}"), result.output
    assert "Run every task of a task file" not in result.output
    assert max(len(line) for line in result.output.splitlines()) <= WIDTH
