"""Issue 42, group 13: the fault server's script format was documented
nowhere but its source. docs/FAULT_SERVER.md names every step kind and
every field a script may carry, its example loads, and the places that use
the server point to it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server.scenario import Scenario, Script, ScriptedToolCall, StreamFault

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "FAULT_SERVER.md").read_text(encoding="utf-8")


def test_every_step_kind_and_field_is_documented():
    kinds = get_args(get_args(Scenario)[0])
    for model in (*kinds, StreamFault, ScriptedToolCall, Script):
        missing = [name for name in model.model_fields if f"`{name}`" not in DOC]
        assert not missing, f"{model.__name__}: {missing} not in docs/FAULT_SERVER.md"
    for kind in kinds:
        assert f"### `{kind.model_fields['kind'].default}`" in DOC


def test_the_documented_example_loads():
    (example,) = [block for block in re.findall(r"```json\n(.*?)```", DOC, re.S)]
    script = Script.model_validate_json(example)
    assert [step.kind for step in script.steps] == ["reply", "http_error", "reply", "reply"]


def test_where_the_server_is_used_points_to_its_format():
    shown = CliRunner().invoke(app, ["fault-server", "--help"], env={"COLUMNS": "80"})
    assert "docs/FAULT_SERVER.md" in "".join(shown.stdout.split())
    assert "docs/FAULT_SERVER.md" in (ROOT / "README.md").read_text(encoding="utf-8")
