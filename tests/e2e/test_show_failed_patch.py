"""Issue 42, group 12, end to end: a run whose submitted patch the verifier
ran and failed, recorded in Docker through ``run_agent``; ``show`` reads its
patch as failed by the verifier, not as "not verified"."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer
from orchestrator.composition.launch import RunRequest, run_agent
from tests.replay.recording import BROKEN_MEAN, call, copy_example_repo, docker_settings, reply
from tests.replay.test_live import VERIFIER

pytestmark = pytest.mark.docker


def test_a_patch_the_verifier_failed_reads_so(tmp_path: Path, fault_server: FaultServer, sandbox_image: str) -> None:
    repo = copy_example_repo(tmp_path / "repo")
    fault_server.script([reply(call("edit_file", path="calc.py", old=BROKEN_MEAN, new="return 0")),
                         reply(call("submit"))])  # then nothing scripted: the run ends without a pass
    settings = docker_settings(tmp_path, fault_server, sandbox_image)
    outcome = run_agent(settings, RunRequest(task="fix mean() in calc.py", repo=repo, verify=VERIFIER))
    assert outcome.result.verdict.value != "PASS" and outcome.result.verifier_runs == 1
    shown = CliRunner().invoke(app, ["show", outcome.run_id, "--db", settings.db_url], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    heading = next(line for line in shown.stdout.splitlines() if line.startswith("patch sha256"))
    assert heading.endswith(", the verifier failed it"), shown.stdout
