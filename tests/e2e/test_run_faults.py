"""End to end through ``run_agent``: real HTTP (the fault-injection server
scripts the model), real Docker sandbox, real SQLite store. Every assertion
about what happened is read back from the store's views."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.adapters.fault_server import Fault, FaultServer, Reply, ScriptedToolCall
from orchestrator.agent import Verdict
from orchestrator.canonical import canonical_bytes
from orchestrator.composition.launch import RunOutcome, RunRequest, run_agent
from orchestrator.settings import Settings
from store import Trajectory

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


def run(settings: Settings, repo: Path, **kw: Any) -> RunOutcome:
    return run_agent(settings, RunRequest(task=TASK, repo=repo, verify="python3 -m pytest -q"), **kw)


def taken(traj: Trajectory) -> list:
    """The turns the agent took."""
    return [t for t in traj.turns if t.calls]


def assert_fully_recorded(traj: Trajectory, fault: FaultServer) -> None:
    """Every turn is committed with one call whose write-ahead request is the
    byte-exact body the server received, and whose envelope is recorded."""
    bodies = [r.json for r in fault.requests]
    calls = [c for t in taken(traj) for c in t.calls]
    assert all(t.committed is not None for t in taken(traj))
    assert len(calls) == len(taken(traj))
    assert all(t.calls for t in traj.turns), "every turn record is a turn the agent took"
    # The patch and the verdict belong to the run, not to a turn.
    assert [e.kind for e in traj.run_events][-2:] == ["patch", "verdict"]
    for call in calls:
        assert call.response is not None, f"turn {call.turn}: no envelope recorded"
        envelope = call.response.envelope()
        assert envelope.request_sha256 == call.request_sha256
        # Each HTTP attempt of the call reached the server with the recorded request.
        attempts = max(1, len(envelope.attempts))
        for _ in range(attempts):
            assert bodies.pop(0) == json.loads(canonical_bytes(call.request().wire_body()))
    assert bodies == [], "the server saw requests the store does not hold"


def recorded(open_store, outcome: RunOutcome, fault: FaultServer) -> Trajectory:
    """The run's trajectory, checked complete and its hash chain intact."""
    store = open_store()
    assert store.verify(outcome.run_id).ok
    traj = store.trajectory(outcome.run_id)
    assert traj.run.status == "finished" and traj.run.verdict == outcome.result.verdict.value
    assert_fully_recorded(traj, fault)
    return traj


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

    traj = recorded(open_store, outcome, fault)
    assert len(taken(traj)) == 4
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
    for before, after in zip(requests, requests[1:], strict=False):
        stable = before.messages[:-1]
        assert after.messages[: len(stable)] == stable
        assert after.messages[-1].content.startswith("[turns left:")
    # The tool result the model saw next is the one recorded.
    assert requests[1].messages[-2].content == done[0].observation
    patch = open_store().events(outcome.run_id, "patch")
    assert len(patch) == 1 and patch[0].data["files"] == ["calc.py"]


def with_limits(settings: Settings, **changes: object) -> Settings:
    return settings.model_copy(update=changes)


def messages_of(traj: Trajectory, turn: int) -> list[str]:
    return [m.content or "" for m in taken(traj)[turn].calls[0].request().messages]


def envelope_of(traj: Trajectory, turn: int):
    return taken(traj)[turn].calls[0].response.envelope()


def test_truncated_tool_call_is_quarantined_never_executed(settings, repo, fault, open_store):
    # A write that would wipe calc.py, cut off at the output ceiling.
    wipe = Reply(tool_calls=(ScriptedToolCall(name="write_file", arguments='{"path": "calc.py", "content": ""}'),),
                 finish_reason="length")
    fault.script([wipe, SUBMIT])
    outcome = run(with_limits(settings, max_turns=2), repo)

    assert outcome.result.verdict is Verdict.BUDGET_EXHAUSTED
    assert outcome.patch == "" and outcome.patch_files == (), "the truncated write must not touch the workspace"
    traj = recorded(open_store, outcome, fault)
    assert envelope_of(traj, 0).status.value == "TRUNCATED"
    first = taken(traj)[0]
    assert first.candidates == () and first.tool_executions == ()
    assert [e.data["action"] for e in first.events if e.kind == "route"] == ["COMPACT"]
    # The next request is not the same one resent: it carries the notice, and
    # the cut-off payload is never shown to the model again.
    later = taken(traj)[1].calls[0]
    assert later.request_sha256 != first.calls[0].request_sha256
    assert any("cut off at the output limit" in m for m in messages_of(traj, 1))
    assert not any(m.tool_calls for m in later.request().messages)
    assert [x.tool_name for x in executions(traj)] == ["submit"]
    assert json.loads(executions(traj)[0].detail_json)["verifier_passed"] is False


@pytest.mark.parametrize("refusal", [Fault.refusal("I can't help with that."), Fault.content_filter("")])
def test_refusal_ends_the_trajectory_with_its_reason(settings, repo, fault, open_store, refusal):
    fault.script([refusal, SUBMIT])
    outcome = run(settings, repo)

    assert outcome.result.verdict is Verdict.REFUSED
    traj = recorded(open_store, outcome, fault)
    assert traj.run.verdict_detail == outcome.result.detail
    if refusal.refusal:
        assert traj.run.verdict_detail == "I can't help with that."
    assert len(taken(traj)) == 1 and executions(traj) == []
    assert fault.pending == 1, "a refusal is never retried"


def test_503_then_success_is_retried_and_both_attempts_recorded(settings, repo, fault, open_store):
    fault.script([Fault.http(503), EDIT, SUBMIT])
    outcome = run(settings, repo)

    assert outcome.result.verdict is Verdict.PASS, outcome.result.detail
    traj = recorded(open_store, outcome, fault)  # checks the server saw the same request twice
    call = taken(traj)[0].calls[0]
    assert [(a.number, a.status, a.http_status) for a in call.attempts] == [
        (1, "TRANSPORT_FAILURE", 503), (2, "COMPLETED", 200)]
    assert call.response.n_attempts == 2 and call.response.status == "COMPLETED"
    assert fault.requests[0].body == fault.requests[1].body


def test_invalid_json_mid_stream_is_rejected_and_the_model_recovers(settings, repo, fault, open_store):
    # Arguments that close a JSON object and keep going: the stream monitor trips.
    bad = Fault.invalid_tool_arguments(valid='{"path": "calc.py"}', junk='}, "x": 1', name="read_file")
    fault.script([bad, EDIT, SUBMIT])
    outcome = run(settings, repo)

    assert outcome.result.verdict is Verdict.PASS, outcome.result.detail
    traj = recorded(open_store, outcome, fault)
    rejected = envelope_of(traj, 0)
    assert rejected.status.value == "REJECTED" and rejected.error.kind == "invalid_json_prefix"
    assert taken(traj)[0].candidates == () and taken(traj)[0].tool_executions == ()
    assert any("rejected while streaming and nothing was run" in m for m in messages_of(traj, 1))
    assert [x.tool_name for x in executions(traj)] == ["edit_file", "submit"]


def test_completed_call_with_bad_arguments_is_rejected_by_the_perimeter(settings, repo, fault, open_store):
    # Complete stream, valid JSON prefix but not a complete object: parse layer;
    # a complete object with an unknown field: schema layer.
    cut = Reply(tool_calls=(ScriptedToolCall(name="edit_file", arguments='{"path": "calc.py", "old": "x"'),))
    extra = tool("read_file", path="calc.py", mode="rw")
    fault.script([cut, extra, EDIT, SUBMIT])
    outcome = run(settings, repo)

    assert outcome.result.verdict is Verdict.PASS, outcome.result.detail
    traj = recorded(open_store, outcome, fault)
    assert [envelope_of(traj, t).status.value for t in range(4)] == ["COMPLETED"] * 4
    assert states(traj)[:2] == [["STAGED", "VALIDATING", "REJECTED"]] * 2
    layers = [c.transitions[-1].layer for t in taken(traj)[:2] for c in t.candidates]
    assert layers == ["parse", "schema"]
    rejected = executions(traj)[:2]
    assert all(x.ok == 0 and x.exit_code is None and x.decision is None for x in rejected)
    assert rejected[0].observation.startswith("error (parse check): arguments are not valid JSON")
    assert "mode" in rejected[1].observation and rejected[1].observation.startswith("error (schema check)")
    # Fed back to the model as the tool's answer.
    assert messages_of(traj, 1)[-2] == rejected[0].observation
    assert messages_of(traj, 2)[-2] == rejected[1].observation


def test_acl_denials_are_recorded_with_their_rule_and_fed_back(settings, repo, fault, open_store):
    two = Reply(tool_calls=(
        ScriptedToolCall(name="write_file", arguments=json.dumps({"path": ".git/config", "content": "[core]\n"})),
        ScriptedToolCall(name="read_file", arguments=json.dumps({"path": "../../etc/passwd"})),
    ))
    fault.script([two, EDIT, SUBMIT])
    outcome = run(settings, repo)

    assert outcome.result.verdict is Verdict.PASS, outcome.result.detail
    assert outcome.patch_files == ("calc.py",)
    traj = recorded(open_store, outcome, fault)
    denied = taken(traj)[0].tool_executions
    assert [(x.tool_name, x.decision) for x in denied] == [("write_file", "deny"), ("read_file", "deny")]
    assert all(x.rule and x.reason and x.exit_code is None for x in denied)
    assert [c.transitions[-1].layer for c in taken(traj)[0].candidates] == ["policy", "policy"]
    fed_back = messages_of(traj, 1)
    for x in denied:
        assert x.observation in fed_back and f"denied by policy rule {x.rule}" in x.observation


def test_claiming_success_without_the_verifier_is_not_a_pass(settings, repo, fault, open_store):
    fault.script([Reply(text="All done, the bug is fixed."), SUBMIT, Reply(text="Really, it is done.")])
    outcome = run(with_limits(settings, max_turns=3), repo)

    assert outcome.result.verdict is Verdict.BUDGET_EXHAUSTED
    assert outcome.result.verifier_runs == 1
    traj = recorded(open_store, outcome, fault)
    assert any("saying the task is done is not enough" in m for m in messages_of(traj, 1))
    (submit,) = executions(traj)
    assert submit.ok == 0 and submit.exit_code != 0 and "verifier FAILED" in submit.observation


def test_text_protocol_search_replace_block(settings, repo, fault, open_store):
    edit = (
        f"The divisor is wrong.\ncalc.py\n<<<<<<< SEARCH\n    return {BUGGY}\n"
        f"=======\n    return {FIXED}\n>>>>>>> REPLACE\n"
    )
    fault.script([
        Reply(text='<tool name="read_file">{"path": </tool>'),  # a completed answer with broken JSON
        Reply(text=edit),
        Reply(text='<tool name="submit">{"summary": "fixed the divisor"}</tool>'),
    ])
    outcome = run(with_limits(settings, tool_protocol="text"), repo)

    assert outcome.result.verdict is Verdict.PASS, outcome.result.detail
    assert f"+    return {FIXED}" in outcome.patch
    traj = recorded(open_store, outcome, fault)
    first = taken(traj)[0].calls[0].request()
    assert first.tools == () and "<<<<<<< SEARCH" in first.messages[0].content
    assert [c.transitions[-1].layer for t in taken(traj) for c in t.candidates] == ["parse", "policy", "policy"]
    edit_row = executions(traj)[1]
    assert edit_row.tool_name == "edit_file" and json.loads(edit_row.arguments_json)["old"] == f"    return {BUGGY}"
    assert messages_of(traj, 1)[-2].startswith("[read_file result]\nerror (parse check)")


@pytest.mark.parametrize(
    "steps, verdict, attempts",
    [
        ([Fault.http(503)] * 3, Verdict.TRANSPORT_FAILURE, 3),  # the client's retries are spent; no blanket retry
        ([Fault.context_overflow()], Verdict.FAULTED, 1),  # an engine fault stops the run, never retried
    ],
    ids=["transport-exhausted", "context-overflow"],
)
def test_run_ending_failures_are_surfaced_not_retried(settings, repo, fault, open_store, steps, verdict, attempts):
    fault.script([*steps, SUBMIT])
    outcome = run(settings, repo)

    assert outcome.result.verdict is verdict
    traj = recorded(open_store, outcome, fault)
    (turn,) = taken(traj)
    assert len(turn.calls[0].attempts) == attempts and turn.candidates == ()
    assert traj.run.verdict == verdict.value and traj.run.verdict_detail
    assert fault.pending == 1, "the loop never sends another request after a run-ending failure"
