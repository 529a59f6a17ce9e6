"""The escrow lifecycle through the real Agent: every candidate is recorded
STAGED -> VALIDATING -> COMMITTED | REJECTED, rejected at the cheapest
perimeter layer (parse, schema, policy) by the loop's own perimeter with the
real ACL, and only a COMMITTED candidate reaches the tools, after its
transitions are journaled. Attacks come from the model's output."""

from __future__ import annotations

import pytest

from orchestrator.agent import Verdict
from orchestrator.candidate import CandidateState
from orchestrator.contract import ToolCall
from policies import Approval, PathGrants, Policy, RunLimits, ToolGrants
from tests.loop.fakes import MemoryTools, build, call, completed

S, V, C, R = CandidateState.STAGED, CandidateState.VALIDATING, CandidateState.COMMITTED, CandidateState.REJECTED

POLICY = Policy(
    name="narrow",
    tools=ToolGrants(allowed=("bash", "read_file", "write_file", "submit"), approval={"bash": Approval.ASK}),
    paths=PathGrants(read=("**",), write=("src/**",), deny=(".git", ".git/**", "secrets/**")),
    limits=RunLimits(max_turns=1),
)


def _one_turn(*calls: ToolCall, **kw):
    loop = build([completed(*calls)], policy=POLICY, tools=MemoryTools(POLICY, files={"src/a.py": "x"}), **kw)
    loop.agent.run()
    return loop


def test_each_candidate_of_a_turn_is_recorded_through_its_states():
    loop = _one_turn(
        call("write_file", {"path": "src/a.py", "content": "ok"}),
        call("write_file", '{"path": "src/b.py", "content": '),
        call("write_file", {"path": "src/b.py"}),
        call("write_file", {"path": "secrets/key", "content": "x"}),
        call("read_file", {"path": "src/a.py"}),
    )
    got = [(c.index, c.states, c.layer) for c in loop.journal.candidates]
    assert got == [
        (0, [S, V, C], "policy"),
        (1, [S, V, R], "parse"),
        (2, [S, V, R], "schema"),
        (3, [S, V, R], "policy"),
        (4, [S, V, C], "policy"),
    ]
    assert [(name, args.model_dump(exclude_defaults=True)) for name, args in loop.tools.executed] == [
        ("write_file", {"path": "src/a.py", "content": "ok"}),
        ("read_file", {"path": "src/a.py"}),
    ]
    # One tool record per candidate; a rejection says its layer, and is what the model sees.
    observations = [c.tool[3].observation for c in loop.journal.candidates]
    assert observations[0] == "wrote src/a.py" and observations[4] == "ok"
    assert [o.split(":")[0] for o in observations[1:4]] == ["error (parse check)", "error (schema check)",
                                                          "error (policy check)"]
    appended = loop.journal.turns[0][1]
    assert [m.role for m in appended] == ["assistant"] + ["tool"] * 5
    assert [m.content for m in appended[1:]] == observations


def test_a_candidate_runs_only_after_its_commit_is_journaled():
    tools = MemoryTools(POLICY)
    seen: list[str] = []
    execute = tools.execute

    def spy(name, args, **kwargs):
        seen.append(loop.journal.log[-1])
        return execute(name, args, **kwargs)

    tools.execute = spy  # type: ignore[method-assign]
    loop = build([completed(call("write_file", {"path": "src/a.py", "content": "ok"}))], policy=POLICY, tools=tools)
    loop.agent.run()
    assert seen == ["transition COMMITTED"]
    assert loop.journal.log.index("tool write_file") > loop.journal.log.index("transition COMMITTED")


# The model's attacks on the perimeter, as the sandbox attack suite has them,
# but through the loop: (tool, raw arguments, the layer that must reject).
ATTACKS = [
    ("read_file", {"path": "../../etc/passwd"}, "policy"),
    ("read_file", {"path": "/etc/passwd"}, "policy"),
    ("read_file", {"path": "/workspace/../etc/shadow"}, "policy"),
    ("read_file", {"path": "//etc/passwd"}, "policy"),
    ("read_file", {"path": "src/a.py\x00.txt"}, "policy"),
    ("write_file", {"path": "../outside.txt", "content": "x"}, "policy"),
    ("write_file", {"path": "src/../../x", "content": "x"}, "policy"),
    ("write_file", {"path": "/tmp/x", "content": "x"}, "policy"),
    ("write_file", {"path": "README.md", "content": "x"}, "policy"),  # outside paths.write
    ("write_file", {"path": ".git/config", "content": "[core]\n\tfsmonitor = evil\n"}, "policy"),
    ("write_file", {"path": "secrets/../secrets/key", "content": "x"}, "policy"),
    ("read_file", {"path": "secrets/key"}, "policy"),
    ("bash", {"command": "rm -rf /"}, "policy"),  # "ask", and nobody approves
    ("write_file", {"path": "src/a.py", "content": "x", "mode": "0777"}, "schema"),  # extra field
    ("write_file", {"path": "src/a.py"}, "schema"),
    ("bash", {"command": ""}, "schema"),
    ("rm_rf", {"path": "."}, "schema"),
    ("read_file", {"path": ["src/a.py"]}, "schema"),
    ("bash", '{"command": "ls"', "parse"),
    ("bash", '["ls"]', "parse"),
    ("bash", '"ls"', "parse"),
    ("bash", "[" * 100_000, "parse"),  # deep nesting: RecursionError inside json
    ("bash", '{"command": "ls"} {"command": "rm -rf /"}', "parse"),
]


@pytest.mark.parametrize("tool,arguments,layer", ATTACKS, ids=[f"{a[2]}-{i}" for i, a in enumerate(ATTACKS)])
def test_an_attack_is_rejected_by_the_loops_perimeter_and_never_runs(tool, arguments, layer):
    loop = _one_turn(call(tool, arguments))
    (record,) = loop.journal.candidates
    assert (record.states, record.layer) == ([S, V, R], layer)
    assert loop.tools.executed == [] and loop.tools.files == {"src/a.py": "x"}
    name, args, decision, outcome = record.tool
    assert outcome.ok is False and outcome.observation.startswith(f"error ({layer} check)")
    if layer == "policy":
        assert decision is not None and decision.effect in ("deny", "ask") and args is not None
    else:
        assert decision is None and args is None and loop.tools.decided == []  # the ACL is never asked


def test_an_ask_goes_to_the_approver_and_its_yes_commits():
    asked = []

    def approve(candidate, decision):
        asked.append((candidate.state, candidate.call.name, decision.effect))
        return True

    loop = _one_turn(call("bash", {"command": "make test"}), approve=approve)
    assert asked == [(V, "bash", "ask")]
    (record,) = loop.journal.candidates
    assert record.states == [S, V, C] and record.tool[2].effect == "ask"
    assert [n for n, _ in loop.tools.executed] == ["bash"]


def test_calls_after_submit_in_the_same_answer_are_rejected_and_never_run():
    tools = MemoryTools(POLICY, verifier=lambda files: True)
    loop = build([completed(call("submit", {}), call("write_file", {"path": "src/z.py", "content": "late"}))],
                 policy=POLICY, tools=tools)
    result = loop.agent.run()
    assert result.verdict is Verdict.PASS
    assert [n for n, _ in tools.executed] == ["submit"]
    late = loop.journal.candidates[1]
    assert late.call.name == "write_file" and late.states == [S, V, R] and late.layer == "submit"


def test_the_text_protocol_stages_its_parsed_calls_through_the_same_perimeter():
    text = ('I will write it.\n<tool name="write_file">{"path": "src/a.py", "content": "ok"}</tool>\n'
            '<tool name="write_file">{"path": ".git/HEAD", "content": "x"}</tool>')
    loop = build([completed(text=text)], policy=POLICY, protocol="text", tools=MemoryTools(POLICY))
    loop.agent.run()
    got = [(c.call.id, c.call.name, c.states, c.layer) for c in loop.journal.candidates]
    assert got == [("call_0_0", "write_file", [S, V, C], "policy"), ("call_0_1", "write_file", [S, V, R], "policy")]
    assert loop.tools.files == {"src/a.py": "ok"}
    assert loop.model.requests[0].tools == ()  # described in the system prompt instead
