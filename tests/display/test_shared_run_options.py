"""The options ``escrow run`` and ``escrow batch`` share (cli/run_options.py)
read the same in both ``--help``s, at 80 columns."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from cli.main import app
from cli.run_options import SHARED

WIDTH = 80


def help_text(command: str) -> str:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH)})
    assert result.exit_code == 0, result.output
    return result.output


def entry(text: str, name: str) -> str:
    """The option's entry (its names, metavar and description), whitespace folded."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^ {{1,5}}{re.escape(name)}[ /]", line))
    block = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith(" " * 6):  # the next entry or section
            break
        block.append(line)
    return " ".join(" ".join(block).split())


NAMES = [option.param_decls[0].split("/")[0] for option in SHARED]


@pytest.mark.parametrize("name", NAMES)
def test_a_shared_option_reads_the_same_in_run_and_batch(name):
    run, batch = help_text("run"), help_text("batch")
    assert entry(run, name) == entry(batch, name)
    assert len(entry(run, name)) > len(name) + 10  # a description, not the bare name


def test_the_entry_reader_tells_two_descriptions_apart():
    one = "Options:\n  --model <str>   Model id sent\n                  to the server.\n  --seed <int>   A seed.\n"
    other = "Options:\n  --model <str>   Model id sent.\n  --seed <int>   A seed.\n"
    assert entry(one, "--model") == "--model <str> Model id sent to the server."
    assert entry(one, "--model") != entry(other, "--model")


@pytest.mark.parametrize("command", ["run", "batch"])
def test_the_protocol_and_role_options_list_their_choices(command):
    text = help_text(command)
    assert entry(text, "--tool-protocol").startswith("--tool-protocol <native|text> ")
    assert entry(text, "--system-role").startswith("--system-role <system|user> ")
