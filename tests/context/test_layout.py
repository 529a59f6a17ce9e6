import pytest

from orchestrator.context import Budget, ContextAssembler, MessageCounter, PromptBytes, TailFormat, prefix_report
from orchestrator.contract import Message, ToolCall, ToolSpec
from orchestrator.errors import ContractError

from .conftest import TOOLS


def turn_messages(t: int) -> list[Message]:
    call = ToolCall(id=f"c{t}", name="bash", arguments=f'{{"cmd":"pytest -k case{t}"}}')
    return [
        Message(role="assistant", content=f"Running case {t}.", tool_calls=(call,)),
        Message(role="tool", tool_call_id=f"c{t}", content=f"case{t}: 3 passed, 1 failed\n" * 5),
    ]


def test_segment_order_and_tail_last(make_context):
    ctx = make_context()
    ctx.append(turn_messages(1), turn=1)
    r = ctx.render(turn=1, turns_left=9)
    roles = [m.role for m in r.messages]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    assert r.messages[1].content == "Make the failing test pass."
    assert r.messages[-1].content.startswith("[turns left: 9; context tokens left: ")
    assert r.stable_messages == 4
    assert [t.name for t in r.tools] == ["bash", "read_file"]


def test_each_turn_extends_the_previous_apart_from_the_tail(make_context):
    ctx = make_context()
    prompts = []
    for t in range(1, 8):
        ctx.append(turn_messages(t), turn=t)
        r = ctx.render(turn=t, turns_left=10 - t)
        assert not r.compactions
        prompts.append(PromptBytes.from_request(r.build_request(model="m"), tail_messages=1))
    for prev, cur in zip(prompts, prompts[1:], strict=False):
        stable = len(prev.records) - 1
        assert cur.records[:stable] == prev.records[:stable]
        assert cur.records[stable] != prev.records[stable]
    report = prefix_report(prompts)
    assert all(t.extends_stable for t in report.turns)
    assert [t.break_message for t in report.turns[1:]] == [len(p.records) - 2 for p in prompts[:-1]]


def test_tools_are_canonical_whatever_the_input_order(make_context, counter):
    reordered = tuple(
        ToolSpec(name=t.name, description=t.description, parameters=dict(reversed(list(t.parameters.items()))))
        for t in reversed(TOOLS)
    )
    a = make_context().render(turn=0).build_request(model="m")
    b = ContextAssembler(system="You are a careful coding agent.", task="Make the failing test pass.", tools=reordered,
                budget=Budget(s_max=4096, k_max=256), counter=counter).render(turn=0).build_request(model="m")
    assert PromptBytes.from_request(a).records[0] == PromptBytes.from_request(b).records[0]
    assert list(b.tools[1].parameters) == sorted(b.tools[1].parameters)


def test_no_tail_when_disabled(make_context):
    r = make_context(tail=None).render(turn=0)
    assert r.stable_messages == len(r.messages) == 2


def test_custom_tail(make_context):
    r = make_context(tail=TailFormat(template="budget: {tokens_left}")).render(turn=0, turns_left=3)
    assert r.messages[-1].content.startswith("budget: ")


def test_build_request_respects_k_max(make_context):
    r = make_context(k_max=256).render(turn=0)
    assert r.build_request(model="m").max_tokens == 256
    assert r.build_request(model="m", max_tokens=100).max_tokens == 100
    with pytest.raises(ContractError, match="K_max"):
        r.build_request(model="m", max_tokens=257)


def test_history_is_append_only(make_context):
    ctx = make_context()
    ctx.append(turn_messages(2), turn=2)
    with pytest.raises(ContractError, match="append-only"):
        ctx.append(turn_messages(1), turn=1)
    with pytest.raises(ContractError, match="one flag per message"):
        ctx.append(turn_messages(3), turn=3, elidable=[True])


def test_estimate_matches_a_fresh_count(make_context, counter):
    ctx = make_context()
    for t in range(1, 5):
        ctx.append(turn_messages(t), turn=t)
    r = ctx.render(turn=4, turns_left=1)
    fresh = MessageCounter(counter)
    raw = fresh.request_overhead() + fresh.tools(r.tools) + sum(fresh.message(m) for m in r.messages[:-1])
    tail = max(fresh.message(r.messages[-1]), fresh.message(TailFormat().reserve_message()))
    assert r.raw_tokens == raw + tail
    assert r.prompt_tokens_estimate == ctx.margin.apply(raw + tail) <= r.budget.available
