"""Fast tests of the loop's pure core: routing, escrow states, perimeter, text protocol."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from pydantic import BaseModel, ConfigDict

from orchestrator.candidate import CandidateState, IllegalTransition, stage
from orchestrator.contract import ToolCall, ToolSpec
from orchestrator.envelope import Payload, Status
from orchestrator.perimeter import check_candidate
from orchestrator.tool_protocols import NativeProtocol, TextProtocol
from policies.routing import ROUTES, Action, route


class ReadArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str


@dataclass(frozen=True)
class D:
    effect: str
    rule: str = "r1"
    reason: str = "because"


def _allow(name, args):
    return D("allow")


def test_every_status_has_exactly_one_route():
    assert set(ROUTES) == set(Status)
    assert route(Status.COMPLETED) is Action.RELEASE
    assert route(Status.TRUNCATED) is Action.COMPACT
    assert route(Status.TRANSPORT_FAILURE) is Action.STOP_TRANSPORT
    # Only COMPLETED leads to release; nothing else reaches execution.
    assert [s for s, a in ROUTES.items() if a is Action.RELEASE] == [Status.COMPLETED]


def test_escrow_state_machine_rejects_shortcuts():
    cand, t = stage(0, ToolCall(id="a", name="read_file", arguments="{}"))
    assert t.to_state is CandidateState.STAGED and t.from_state is None
    with pytest.raises(IllegalTransition):
        cand.to(CandidateState.COMMITTED)
    validating, _ = cand.to(CandidateState.VALIDATING)
    done, _ = validating.to(CandidateState.REJECTED)
    with pytest.raises(IllegalTransition):
        done.to(CandidateState.COMMITTED)


@pytest.mark.parametrize(
    "arguments, layer",
    [
        ('{"path": "a.py"', "parse"),
        ("[1, 2]", "parse"),
        ('{"path": "a.py", "mode": "x"}', "schema"),
        ("{}", "schema"),
    ],
)
def test_perimeter_rejects_at_the_cheapest_layer(arguments, layer):
    cand, _ = stage(0, ToolCall(id="a", name="read_file", arguments=arguments))
    result = check_candidate(cand, {"read_file": ReadArgs}, _allow)
    assert result.candidate.state is CandidateState.REJECTED
    assert result.layer == layer
    assert [t.to_state for t in result.transitions] == [CandidateState.VALIDATING, CandidateState.REJECTED]


def test_perimeter_unknown_tool_and_policy_denial_and_ask():
    cand, _ = stage(0, ToolCall(id="a", name="rm_rf", arguments="{}"))
    assert check_candidate(cand, {"read_file": ReadArgs}, _allow).layer == "schema"
    cand, _ = stage(0, ToolCall(id="a", name="read_file", arguments='{"path": "x"}'))
    denied = check_candidate(cand, {"read_file": ReadArgs}, lambda n, a: D("deny", "deny-secrets", "no"))
    assert denied.layer == "policy" and "deny-secrets" in denied.error
    asked = check_candidate(cand, {"read_file": ReadArgs}, lambda n, a: D("ask"))
    assert not asked.committed
    approved = check_candidate(cand, {"read_file": ReadArgs}, lambda n, a: D("ask"), approve=lambda c, d: True)
    assert approved.committed and approved.args == ReadArgs(path="x")


def test_text_protocol_parses_tool_and_edit_blocks_in_order():
    text = (
        'Let me look.\n<tool name="read_file">{"path": "calc.py"}</tool>\n'
        "calc.py\n<<<<<<< SEARCH\n    return 1\n=======\n    return 2\n>>>>>>> REPLACE\n"
        '<tool name="submit">{}</tool>'
    )
    calls = TextProtocol().calls(Payload(text=text), turn=3)
    assert [c.name for c in calls] == ["read_file", "edit_file", "submit"]
    assert [c.id for c in calls] == ["call_3_0", "call_3_1", "call_3_2"]
    assert json.loads(calls[1].arguments) == {"path": "calc.py", "old": "    return 1", "new": "    return 2"}
    assert TextProtocol().calls(Payload(text="I fixed it, all done."), turn=0) == ()


def test_protocols_render_tools_differently():
    spec = ToolSpec(name="read_file", description="Read a file", parameters={"type": "object"})
    assert NativeProtocol().request_tools((spec,)) == (spec,)
    assert TextProtocol().request_tools((spec,)) == ()
    assert "read_file" in TextProtocol().system_addendum((spec,))


def test_text_protocol_accepts_a_block_closed_by_its_stop_sequence():
    # Servers strip the stop sequence "</tool>": the final block arrives unclosed.
    text = 'Reading it.\n<tool name="read_file">{"path": "calc.py"}'
    (call,) = TextProtocol().calls(Payload(text=text), turn=0)
    assert call.name == "read_file" and json.loads(call.arguments) == {"path": "calc.py"}
    assert TextProtocol.stop == ("</tool>",) and NativeProtocol.stop == ()
