"""The real Agent, in process, on every route and to every verdict: each
envelope status is carried out as ``policies.routing`` says, and each
verdict is reached and recorded once. Fake ports, real Context."""

from __future__ import annotations

import threading

import pytest

from orchestrator.agent import Verdict
from orchestrator.candidate import CandidateState
from orchestrator.envelope import Status
from orchestrator.suspect import SuspectReason, summary
from policies import RunLimits, default_policy
from policies.routing import ROUTES, Action
from tests.loop.fakes import Loop, MemoryTools, build, call, completed, envelope

POLICY = default_policy()
WRITE = call("write_file", {"path": "src/a.py", "content": "print('pwned')"})
FIX = call("write_file", {"path": "src/a.py", "content": "fixed"})
GAVE_UP = "connection refused (gave up after 3 attempts)"


def _routes(loop: Loop) -> list[tuple[str, str]]:
    return [(d["status"], d["action"]) for d in loop.journal.of_kind("route")]


# --- routes that end the run -------------------------------------------------------------------
ENDING = {
    Status.REFUSED: (Verdict.REFUSED, envelope(Status.REFUSED, WRITE, refusal="I will not do that")),
    Status.TRANSPORT_FAILURE: (
        Verdict.TRANSPORT_FAILURE, envelope(Status.TRANSPORT_FAILURE, error=GAVE_UP),
    ),
    Status.CANCELED: (Verdict.CANCELED, envelope(Status.CANCELED, WRITE, error="cancelled mid-stream")),
    Status.FAULTED: (Verdict.FAULTED, envelope(Status.FAULTED, WRITE, error="engine fault: CUDA error")),
}
# --- routes that quarantine the payload and go on ----------------------------------------------
CONTINUING = {Status.TRUNCATED: "cut off at the output limit", Status.REJECTED: "rejected while streaming"}


def test_every_status_has_a_case_here_and_a_route():
    assert set(ENDING) | set(CONTINUING) | {Status.COMPLETED} == set(Status) == set(ROUTES)


@pytest.mark.parametrize("status", list(ENDING), ids=[s.value for s in ENDING])
def test_an_ending_status_ends_the_run_with_its_verdict_and_runs_nothing(status):
    verdict, answer = ENDING[status]
    loop = build([answer], policy=POLICY)
    result = loop.agent.run()
    assert result.verdict is verdict
    expected_detail = answer.payload.refusal or answer.error.message
    assert result.detail == expected_detail
    assert loop.journal.verdict == {"verdict": verdict.value, "detail": expected_detail}
    assert _routes(loop) == [(status.value, ROUTES[status].value)]
    # The payload never left escrow: no candidate staged, nothing executed.
    assert loop.journal.candidates == [] and loop.tools.executed == [] and loop.tools.files == {}
    assert len(loop.model.requests) == 1 and result.turns == 1
    assert loop.journal.turns == [(0, ())]


def test_transport_failure_is_not_retried_by_the_loop():
    loop = build([ENDING[Status.TRANSPORT_FAILURE][1], completed(WRITE)], policy=POLICY)
    assert loop.agent.run().verdict is Verdict.TRANSPORT_FAILURE
    assert len(loop.model.requests) == 1  # the client's retries are the only ones
    assert len(loop.model.script) == 1


@pytest.mark.parametrize("status", list(CONTINUING), ids=[s.value for s in CONTINUING])
def test_a_quarantined_payload_is_never_run_nor_resent_and_the_model_is_told(status):
    bad = envelope(status, WRITE, text="half an answer", error="arguments are not JSON", completion_tokens=256)
    loop = build([bad, completed(FIX), completed(call("submit", {}))], policy=POLICY, tools=_passing())
    result = loop.agent.run()
    assert result.verdict is Verdict.PASS and result.turns == 3
    assert _routes(loop)[0] == (status.value, ROUTES[status].value)
    # Turn 0 staged no candidate; the one write that ran is turn 1's.
    assert [(c.turn, c.call.arguments) for c in loop.journal.candidates][0] == (1, FIX.arguments)
    assert [name for name, _ in loop.tools.executed] == ["write_file", "submit"]
    notice = loop.journal.turns[0][1]
    assert len(notice) == 1 and notice[0].role == "user" and CONTINUING[status] in notice[0].content
    second = loop.model.requests[1]
    assert notice[0] in second.messages
    sent = " ".join(str(m.content) + str(m.tool_calls) for m in second.messages)
    assert "half an answer" not in sent and "pwned" not in sent
    assert second.messages != loop.model.requests[0].messages


def _passing() -> MemoryTools:
    return MemoryTools(POLICY, verifier=lambda files: files.get("src/a.py") == "fixed")


def test_a_completed_answer_without_a_tool_call_is_not_done():
    loop = build([completed(text="All done, the tests pass."), completed(call("submit", {}))],
                 policy=POLICY, limits=RunLimits(max_turns=2))
    result = loop.agent.run()
    assert result.verdict is Verdict.BUDGET_EXHAUSTED and result.verifier_runs == 1
    nudge = loop.journal.turns[0][1][-1]
    assert nudge.role == "user" and "No tool call was made" in nudge.content
    assert _routes(loop) == [("COMPLETED", Action.RELEASE.value)] * 2


def test_a_failing_verifier_does_not_pass_and_the_run_goes_on():
    loop = build([completed(call("submit", {})), completed(FIX), completed(call("submit", {}))],
                 policy=POLICY, tools=_passing())
    result = loop.agent.run()
    assert result.verdict is Verdict.PASS and result.verifier_runs == 2 and result.turns == 3


# --- every verdict -----------------------------------------------------------------------------


def _cancel_before_turn() -> Loop:
    cancel = threading.Event()
    cancel.set()
    return build([], policy=POLICY, cancel=cancel)


def _interrupt(request):
    raise KeyboardInterrupt


ATEXIT = SuspectReason(code="atexit", path="src/a.py", line=1, text="atexit handler: import atexit")
VERDICTS = {
    Verdict.SUSPECT: (lambda: build([completed(FIX, call("submit", {}))], policy=POLICY, tools=MemoryTools(
        POLICY, verifier=lambda files: files.get("src/a.py") == "fixed", suspect=(ATEXIT,))), summary((ATEXIT,))),
    Verdict.PASS: (lambda: build([completed(FIX, call("submit", {}))], policy=POLICY, tools=_passing()),
                   "the verifier passed"),
    Verdict.BUDGET_EXHAUSTED: (lambda: build([completed(call("bash", {"command": "ls"}))], policy=POLICY,
                                             limits=RunLimits(max_turns=1)), "turns: turn limit reached (1)"),
    Verdict.REFUSED: (lambda: build([ENDING[Status.REFUSED][1]], policy=POLICY), "I will not do that"),
    Verdict.TRANSPORT_FAILURE: (lambda: build([ENDING[Status.TRANSPORT_FAILURE][1]], policy=POLICY), GAVE_UP),
    Verdict.FAULTED: (lambda: build([ENDING[Status.FAULTED][1]], policy=POLICY), "engine fault: CUDA error"),
    Verdict.CANCELED: (_cancel_before_turn, "canceled before the next turn"),
    Verdict.INFRA_ERROR: (lambda: build([completed(call("bash", {"command": "ls"}))], policy=POLICY,
                                        tools=MemoryTools(POLICY, broken=RuntimeError("sandbox container is gone"))),
                          "during the run: RuntimeError: sandbox container is gone"),
}


def test_every_verdict_has_a_case():
    assert set(VERDICTS) == set(Verdict)


@pytest.mark.parametrize("verdict", list(VERDICTS), ids=[v.value for v in VERDICTS])
def test_each_verdict_is_reached_and_recorded_once_and_last(verdict):
    make, detail = VERDICTS[verdict]
    loop = make()
    seen = []
    result = loop.agent.run(before_verdict=lambda r: seen.append((r.verdict, list(loop.journal.log))))
    assert (result.verdict, result.detail) == (verdict, detail)
    suspect = {"suspect": [ATEXIT.model_dump()]} if verdict is Verdict.SUSPECT else {}
    assert loop.journal.verdict == {"verdict": verdict.value, "detail": detail, **suspect}
    assert result.suspect == ((ATEXIT,) if verdict is Verdict.SUSPECT else ())
    assert loop.journal.log[-1] == "event verdict"
    assert seen == [(verdict, loop.journal.log[:-1])]  # before_verdict runs just before it


def test_ctrl_c_inside_a_model_call_is_a_recorded_cancel_not_a_traceback():
    loop = build([_interrupt], policy=POLICY)
    result = loop.agent.run()
    assert result.verdict is Verdict.CANCELED and result.detail == "interrupted by the user"
    assert loop.journal.verdict["verdict"] == "CANCELED"
    assert loop.journal.log[-2:] == ["request 0", "event verdict"]


def test_a_cancel_between_turns_stops_before_the_next_request():
    cancel = threading.Event()

    def then_cancel(request):
        cancel.set()
        return completed(call("bash", {"command": "ls"}))

    loop = build([then_cancel, completed(WRITE)], policy=POLICY, cancel=cancel)
    result = loop.agent.run()
    assert result.verdict is Verdict.CANCELED and result.turns == 1
    # The cancel came while the model answered: its call is refused, not run.
    assert len(loop.model.requests) == 1 and loop.tools.executed == []
    (refused,) = loop.journal.candidates
    assert refused.states[-1] is CandidateState.REJECTED and refused.layer == "limit"
