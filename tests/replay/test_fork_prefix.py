"""A fork starts only from a prefix identical to its parent's: a re-executed
tool that drifted before the fork turn stops it with a divergence naming
what differs, unless --allow-drift. Real parts: Docker, the fault server."""

from __future__ import annotations

import json

import pytest

from orchestrator.adapters.fault_server import FaultServer
from tests.replay.test_live import STEPS, replay_cli

pytestmark = pytest.mark.docker


def drift_turn_one(repo) -> None:
    """The recorded turn-1 read_file of calc.py now reads something else."""
    calc = repo / "calc.py"
    calc.write_text(calc.read_text().replace("A tiny calculator", "A small calculator"))


def test_a_fork_after_a_drifted_turn_is_refused(docker_run, fault_server: FaultServer):
    db, repo, run_id = docker_run
    drift_turn_one(repo)
    fault_server.script(STEPS[2:])
    seen = len(fault_server.requests)
    result = replay_cli(db, run_id, "--fork-at", "2", "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["divergence"]["kind"] == "prefix" and report["divergence"]["turn"] == 1
    assert (
        "turn 1 read_file: output" in report["divergence"]["diff"] and "--allow-drift" in report["divergence"]["diff"]
    )
    assert not report["identical"] and report["verdict"] == "DIVERGED"
    assert len(fault_server.requests) == seen, "no live call was made from a drifted prefix"
    text = replay_cli(db, run_id, "--fork-at", "2")
    assert text.exit_code == 1 and "shared with the parent" not in text.output and "refused" in text.output


def test_allow_drift_forks_from_the_drifted_prefix_and_says_so(docker_run, fault_server: FaultServer):
    db, repo, run_id = docker_run
    drift_turn_one(repo)
    fault_server.script(STEPS[2:])
    result = replay_cli(db, run_id, "--fork-at", "2", "--allow-drift", "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == 0, result.output
    assert report["verdict"] == "PASS" and not report["identical"] and report["allow_drift"]
    assert [(d["turn"], d["tool"]) for d in report["drifts"]] == [(1, "read_file")]
    fault_server.script(STEPS[2:])
    text = replay_cli(db, run_id, "--fork-at", "2", "--allow-drift")
    assert "differs from the parent's" in text.output and "shared with the parent" not in text.output


def test_a_fork_from_an_untouched_prefix_is_shared(docker_run, fault_server: FaultServer):
    db, _, run_id = docker_run
    fault_server.script(STEPS[2:])
    text = replay_cli(db, run_id, "--fork-at", "2")
    assert text.exit_code == 0, text.output
    assert "turns before it shared with the parent" in text.output
