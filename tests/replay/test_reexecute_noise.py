"""Re-execution tells noise from drift: outputs are compared after the
policy's normalisation of volatile fields (durations, timestamps, temp paths,
addresses). Noise only exits 10; a changed exit code, output or workspace is
real drift and exits 1. Real parts: ``escrow run``'s composition root in
Docker, the fault server scripting the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.adapters.fault_server import FaultServer
from orchestrator.composition.launch import RunRequest, run_agent
from orchestrator.replay.noise import classify
from policies import default_policy
from tests.replay.recording import BROKEN_MEAN, FIXED_MEAN, call, copy_example_repo, docker_settings, reply
from tests.replay.test_live import VERIFIER, replay_cli

NOISE_ONLY = 10
NOISY = "date +%H:%M:%S.%N; date -u +%Y-%m-%dT%H:%M:%S.%NZ; mktemp; echo \"3 passed in 0.0$((RANDOM % 9))s\""
REAL = "echo drawn $RANDOM$RANDOM; echo $RANDOM$RANDOM > drawn.md"  # a kind the repo holds (README.md)


def record(tmp_path: Path, server: FaultServer, image: str, command: str) -> tuple[Path, str]:
    repo = copy_example_repo(tmp_path / "repo")
    server.script([
        reply(call("bash", command=command)),
        reply(call("edit_file", path="calc.py", old=BROKEN_MEAN, new=FIXED_MEAN)),
        reply(call("submit")),
    ])
    outcome = run_agent(
        docker_settings(tmp_path, server, image), RunRequest(task="fix mean()", repo=repo, verify=VERIFIER)
    )
    assert outcome.result.verdict.value == "PASS"
    return tmp_path / "escrow.db", outcome.run_id


def test_default_normalisation_covers_the_volatile_fields():
    volatile = default_policy().replay.volatile
    for before, after in (("3 passed in 0.01s", "3 passed in 0.02s"), ("at 12:00:01.5", "at 12:00:03.25"),
                          ("2026-11-30T19:54:00Z", "2026-12-01T01:02:03.456Z"), ("/tmp/tmp.abcd", "/tmp/tmp.wxyz"),
                          ("obj at 0x7f00aa11bb22", "obj at 0x7f00cc33dd44")):
        assert classify(0, 0, before, after, volatile) == "noise", (before, after)
    assert classify(0, 0, "3 passed", "2 passed, 1 failed", volatile) == "output"
    assert classify(0, 1, "x", "x", volatile) == "exit_code"
    assert classify(0, 0, "x", "x", ()) is None
    assert classify(0, 0, "3 passed in 0.01s", "3 passed in 0.02s", ()) == "output", "no normalisation, no noise"


@pytest.mark.docker
def test_a_reexecution_differing_only_in_volatile_output_is_noise_only(tmp_path, fault_server, sandbox_image):
    db, run_id = record(tmp_path, fault_server, sandbox_image, NOISY)
    result = replay_cli(db, run_id, "--reexecute", "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == NOISE_ONLY, result.output
    assert report["noise_only"] and not report["identical"] and report["request_mismatches"] == []
    assert [d["kind"] for d in report["drifts"]] == ["noise"] and report["drifts"][0]["turn"] == 0
    text = replay_cli(db, run_id, "--reexecute")
    assert "NOISE ONLY" in text.output and "first drifting turn" not in text.output


@pytest.mark.docker
def test_real_drift_in_output_and_workspace_is_reported_apart_from_noise(tmp_path, fault_server, sandbox_image):
    db, run_id = record(tmp_path, fault_server, sandbox_image, REAL)
    result = replay_cli(db, run_id, "--reexecute", "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 1, result.output
    assert not report["noise_only"]
    kinds = {d["kind"] for d in report["drifts"]}
    assert {"output", "workspace"} <= kinds, report["drifts"]
    workspace = next(d for d in report["drifts"] if d["kind"] == "workspace")
    assert "drawn.md" in workspace["diff"]


def test_the_documented_default_normalisation_is_the_policys():
    import re
    import tomllib

    doc = (Path(__file__).resolve().parents[2] / "docs" / "REPLAY.md").read_text()
    block = re.search(r"```toml\n(\[\[replay\.volatile\]\].*?)```", doc, re.S)
    assert block is not None
    documented = tomllib.loads(block.group(1))["replay"]["volatile"]
    assert documented == [v.model_dump() for v in default_policy().replay.volatile]
