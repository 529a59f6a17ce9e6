"""A run parses its model URL once (issue 44, point 4): ``escrow run``
reaches the server with it and hands the parsed ``ModelUrl`` down, and
``run_agent`` called alone parses it in ``compose.wire``. Each parse is
counted through a real run on the fault server (real Docker, real SQLite)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer, Reply, ScriptedToolCall
from orchestrator.adapters.model_client.reach import ModelUrl
from orchestrator.composition.launch import RunRequest, run_agent
from orchestrator.exit_codes import ExitCode
from orchestrator.settings import Settings

pytestmark = [pytest.mark.docker]


def tool(name: str, **args: object) -> Reply:
    return Reply(tool_calls=(ScriptedToolCall(name=name, arguments=json.dumps(args)),))


FIX = [tool("edit_file", path="calc.py", old="(len(values) + 1)", new="len(values)"), tool("submit", summary="fixed")]


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs ``ModelUrl.parse`` is given, each parse still the real one."""
    seen: list[str] = []
    real = ModelUrl.parse.__func__  # type: ignore[attr-defined]

    def counting(cls: type[ModelUrl], url: str) -> ModelUrl:
        seen.append(url)
        return real(cls, url)

    monkeypatch.setattr(ModelUrl, "parse", classmethod(counting))
    return seen


def test_escrow_run_parses_the_model_url_once(tmp_path: Path, repo: Path, fault: FaultServer, sandbox_image: str,
                                              parsed: list[str]) -> None:
    fault.script(FIX)
    result = CliRunner().invoke(app, [
        "run", "Fix mean() in calc.py", "--repo", str(repo), "--verify", "python3 -m pytest -q",
        "--model-url", fault.base_url, "--context-window", "8192", "--tokenizer", "cl100k_base", "--json"],
        env={"ESCROW_HOME": str(tmp_path / "home"), "ESCROW_SANDBOX_IMAGE": sandbox_image})
    assert result.exit_code == ExitCode.OK, result.output
    assert json.loads(result.stdout)["verdict"] == "PASS"
    assert parsed == [fault.base_url]


def test_run_agent_alone_parses_the_model_url_once(settings: Settings, repo: Path, fault: FaultServer,
                                                   parsed: list[str]) -> None:
    fault.script(FIX)
    outcome = run_agent(settings, RunRequest(task="Fix mean() in calc.py", repo=repo, verify="python3 -m pytest -q"))
    assert outcome.result.verdict.value == "PASS"
    assert parsed == [fault.base_url]
