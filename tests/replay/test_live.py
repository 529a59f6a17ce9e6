"""Re-execution and fork against real parts: the Docker sandbox (runs
recorded by ``escrow run``'s own composition root) and the fault-injection
model server over loopback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer
from orchestrator.composition.launch import RunRequest, run_agent
from store import Store
from tests.replay.recording import BROKEN_MEAN, FIXED_MEAN, call, copy_example_repo, docker_settings, reply
from tests.replay.test_offline import _replay_in_subprocess

pytestmark = pytest.mark.docker
VERIFIER = 'python3 -c "import calc; assert calc.mean([1, 2, 3, 4]) == 2.5"'
STEPS = [
    reply(call("list_files")),
    reply(call("read_file", path="calc.py")),
    reply(call("bash", command="python3 -c 'import calc; print(calc.mean([1, 2]))'")),
    reply(call("submit")),
    reply(call("edit_file", path="calc.py", old=BROKEN_MEAN, new=FIXED_MEAN)),
    reply(call("submit")),
]


@pytest.fixture
def docker_run(tmp_path: Path, fault_server: FaultServer, sandbox_image: str) -> tuple[Path, Path, str]:
    """(store file, starting repo, run id) of a PASS run recorded in Docker."""
    repo = copy_example_repo(tmp_path / "repo")
    fault_server.script(STEPS)
    settings = docker_settings(tmp_path, fault_server, sandbox_image)
    outcome = run_agent(settings, RunRequest(task="fix mean() in calc.py", repo=repo, verify=VERIFIER))
    assert outcome.result.verdict.value == "PASS"
    return tmp_path / "escrow.db", repo, outcome.run_id


def replay_cli(db: Path, *args: str):
    return CliRunner().invoke(app, ["replay", *args, "--db", f"sqlite:///{db}"])


def test_docker_run_replays_offline_across_hash_seeds(docker_run):
    db, _, run_id = docker_run
    one, two = (_replay_in_subprocess(db, run_id, seed) for seed in ("1", "2"))
    with Store.open(f"sqlite:///{db}", readonly=True) as store:
        recorded = [c.request_sha256 for c in store.calls(run_id)]
    assert [t["replayed_sha256"] for t in one["turns"]] == [t["replayed_sha256"] for t in two["turns"]] == recorded
    assert one["digest"] == two["digest"] == one["recorded_digest"]


def test_reexecute_of_an_unchanged_workspace_has_no_drift(docker_run):
    db, _, run_id = docker_run
    result = replay_cli(db, run_id, "--reexecute", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["identical"] and report["drifts"] == [] and len(report["turns"]) == 6
    assert report["mode"] == "reexecute"


def test_reexecute_reports_the_first_drifting_turn_after_a_repo_edit(docker_run):
    db, repo, run_id = docker_run
    calc = repo / "calc.py"
    calc.write_text(calc.read_text().replace("A tiny calculator", "A small calculator"))
    result = replay_cli(db, run_id, "--reexecute", "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert not report["identical"]
    drift = report["drifts"][0]
    assert (drift["turn"], drift["tool"]) == (1, "read_file")
    assert drift["recorded_exit_code"] == drift["replayed_exit_code"] == 0
    assert drift["recorded_output_sha256"] != drift["replayed_output_sha256"]
    assert "A small calculator" in drift["diff"]
    assert [m["turn"] for m in report["request_mismatches"]][:1] == [2]  # the drifted output reached the next request
    text = replay_cli(db, run_id, "--reexecute")
    assert "first drifting turn: 1" in text.output and text.exit_code == 1


def test_fork_continues_live_as_a_linked_run_sharing_its_first_turns(docker_run, fault_server: FaultServer):
    db, _, run_id = docker_run
    fault_server.script(
        [reply(call("edit_file", path="calc.py", old=BROKEN_MEAN, new=FIXED_MEAN)), reply(call("submit"))]
    )
    seen = len(fault_server.requests)
    result = replay_cli(db, run_id, "--fork-at", "4", "--temperature", "0.7", "--seed", "11",
                        "--model-url", fault_server.base_url, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    fork_id = report["replay_run_id"]
    assert report["verdict"] == "PASS" and report["forked_at_turn"] == 4 and report["identical"]
    live = fault_server.requests[seen:]
    assert len(live) == 2 and all(r.json["temperature"] == 0.7 and r.json["seed"] == 11 for r in live)
    with Store.open(f"sqlite:///{db}") as store:
        fork, parent_calls, fork_calls = store.run(fork_id), store.calls(run_id), store.calls(fork_id)
        assert (fork.mode, fork.parent_run_id, fork.forked_at_turn) == ("fork", run_id, 4)
        assert [c.request_sha256 for c in fork_calls[:4]] == [c.request_sha256 for c in parent_calls[:4]]
        assert [c.temperature for c in fork_calls] == [0.0] * 4 + [0.7, 0.7]
        from orchestrator.replay import trajectory_digest

        assert trajectory_digest(store.trajectory(fork_id), turns=4) == trajectory_digest(
            store.trajectory(run_id), turns=4
        )
    shown = CliRunner().invoke(app, ["show", fork_id, "--db", f"sqlite:///{db}"])
    assert f"forked from {run_id} at turn 4" in shown.output
    # A fork replays offline too: its own recording switches settings at the same turn.
    again = replay_cli(db, fork_id, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["identical"]
