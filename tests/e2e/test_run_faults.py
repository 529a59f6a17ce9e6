"""End to end through ``execute_run``: real HTTP (the fault-injection server
scripts the model), real Docker sandbox, real SQLite store. Every assertion
about what happened is read back from the store's views."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.run_session import RunOutcome, execute_run
from orchestrator.agent import Verdict
from orchestrator.canonical import canonical_bytes
from orchestrator.fault_server import Fault, FaultServer, Reply, ScriptedToolCall, StreamFault
from orchestrator.settings import Settings
from store import Store, Trajectory

pytestmark = [pytest.mark.docker]

BUGGY = "sum(values) / (len(values) + 1)"
FIXED = "sum(values) / len(values)"
TASK = "Fix the bug in mean() in calc.py so that the tests pass."


def tool(name: str, **args: object) -> Reply:
    return Reply(tool_calls=(ScriptedToolCall(name=name, arguments=json.dumps(args)),))


READ = tool("read_file", path="calc.py")
EDIT = tool("edit_file", path="calc.py", old=BUGGY, new=FIXED)
TEST = tool("bash", command="python3 -m pytest -q")
SUBMIT = tool("submit", summary="mean() divided by n+1; now divides by n")


def run(settings: Settings, repo: Path, **kw: object) -> RunOutcome:
    return execute_run(settings, task=TASK, repo=repo, verifier="python3 -m pytest -q", **kw)


def taken(traj: Trajectory) -> list:
    """The turns the agent took (the run-level patch and verdict events sit at
    turn == number of turns, in an events-only record)."""
    return [t for t in traj.turns if t.calls]


def assert_fully_recorded(traj: Trajectory, fault: FaultServer) -> None:
    """Every turn is committed with one call whose write-ahead request is the
    byte-exact body the server received, and whose envelope is recorded."""
    bodies = [r.json for r in fault.requests]
    calls = [c for t in taken(traj) for c in t.calls]
    assert all(t.committed is not None for t in taken(traj))
    assert len(calls) == len(taken(traj))
    last = traj.turns[-1]
    assert not last.calls and [e.kind for e in last.events][-1] == "verdict"
    for call in calls:
        assert call.response is not None, f"turn {call.turn}: no envelope recorded"
        envelope = call.response.envelope()
        assert envelope.request_sha256 == call.request_sha256
        # Each HTTP attempt of the call reached the server with the recorded request.
        attempts = max(1, len(envelope.attempts))
        for _ in range(attempts):
            assert bodies.pop(0) == json.loads(canonical_bytes(call.request().wire_body()))
    assert bodies == [], "the server saw requests the store does not hold"


def states(traj: Trajectory) -> list[list[str]]:
    return [[t.to_state for t in c.transitions] for turn in traj.turns for c in turn.candidates]


def executions(traj: Trajectory) -> list:
    return [x for turn in traj.turns for x in turn.tool_executions]


def file_text(repo: Path) -> str:
    return (repo / "calc.py").read_text()


def test_scripted_fix_passes_and_everything_is_recorded(settings, repo, fault, open_store):
    fault.script([READ, EDIT, TEST, SUBMIT])
    outcome = run(settings, repo)

    assert outcome.result.verdict is Verdict.PASS, outcome.result.detail
    assert f"-    return {BUGGY}" in outcome.patch and f"+    return {FIXED}" in outcome.patch
    assert outcome.patch_files == ("calc.py",)
    assert BUGGY in file_text(repo), "the user's checkout is never modified without --apply"

    store: Store = open_store()
    traj = store.trajectory(outcome.run_id)
    assert traj.run.status == "finished" and traj.run.verdict == "PASS"
    assert len(taken(traj)) == 4
    assert_fully_recorded(traj, fault)
    assert states(traj) == [["STAGED", "VALIDATING", "COMMITTED"]] * 4
    done = executions(traj)
    assert [x.tool_name for x in done] == ["read_file", "edit_file", "bash", "submit"]
    assert all(x.decision == "allow" and x.rule for x in done)
    assert BUGGY in done[0].observation
    assert done[1].ok == 1 and "edited calc.py" in done[1].observation
    assert done[2].exit_code == 0 and "2 passed" in done[2].stdout
    assert json.loads(done[3].detail_json)["verifier_passed"] is True
    # Prefix-stable: each request starts with the previous one's messages, all
    # but the volatile tail (the last message, the remaining budget).
    requests = [t.calls[0].request() for t in taken(traj)]
    for before, after in zip(requests, requests[1:]):
        stable = before.messages[:-1]
        assert after.messages[: len(stable)] == stable
        assert after.messages[-1].content.startswith("[turns left:")
    # The tool result the model saw next is the one recorded.
    assert requests[1].messages[-2].content == done[0].observation
    patch = [e for e in store.events(outcome.run_id, "patch")]
    assert len(patch) == 1 and patch[0].data["files"] == ["calc.py"]
