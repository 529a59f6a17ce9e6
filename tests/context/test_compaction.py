import pytest

from orchestrator.context import CompactionPolicy, PromptBytes, prefix_report
from orchestrator.context.compaction import elide_text
from orchestrator.contract import Message, ToolCall
from orchestrator.errors import BudgetExhausted

LOG_LINE = "E   AssertionError: expected 0x7ffd3a2c got 0x7ffd3a30 at src/alloc.c:217\n"


def tool_turn(t: int, lines: int) -> list[Message]:
    call = ToolCall(id=f"c{t}", name="bash", arguments='{"cmd":"make test"}')
    return [
        Message(role="assistant", content=f"Step {t}: run the tests.", tool_calls=(call,)),
        Message(role="tool", tool_call_id=f"c{t}", content=f"run {t}\n" + LOG_LINE * lines),
    ]


def test_elide_text_keeps_head_and_tail():
    text = "H" * 50 + "x" * 1000 + "T" * 40
    out = elide_text(text, 50, 40)
    assert out.startswith("H" * 50) and out.endswith("T" * 40) and "1000 characters elided" in out
    assert elide_text("short", 50, 40) is None


def test_old_tool_outputs_are_elided_first(make_context):
    ctx = make_context(s_max=4096, k_max=256, policy=CompactionPolicy(keep_head_chars=200, keep_tail_chars=200))
    sent = []
    for t in range(1, 5):
        ctx.append(tool_turn(t, 40), turn=t)
        r = ctx.render(turn=t, turns_left=10)
        sent.append(r)
        if r.compactions:
            break
    event = r.compactions[0]
    assert event.strategy == "elide_tool_outputs"
    assert event.first_changed_message == 3  # the oldest tool output: system, task, assistant, tool
    assert event.tokens_after < event.tokens_before
    assert r.first_changed_message == 3
    assert "characters elided" in r.messages[3].content
    assert r.messages[3].content.startswith("run 1\n")
    assert r.prompt_tokens_estimate <= r.budget.available
    prompts = [PromptBytes.from_request(x.build_request(model="m"), tail_messages=1) for x in sent]
    assert prefix_report(prompts).turns[-1].break_message == 3


def test_oldest_turns_are_dropped_after_the_pinned_prefix(make_context):
    ctx = make_context(s_max=1500, k_max=200)
    for t in range(1, 30):
        ctx.append([Message(role="assistant", content=f"Thinking about step {t}. " * 12)], turn=t)
        r = ctx.render(turn=t, turns_left=30 - t)
        if r.compactions:
            break
    (event,) = r.compactions
    assert event.strategy == "drop_oldest_turns" and event.first_changed_message == 2
    assert r.messages[0].role == "system" and r.messages[1].content == "Make the failing test pass."
    assert "earlier turns were removed" in r.messages[2].content
    assert r.messages[-2].content.startswith(f"Thinking about step {t}.")
    # compacted down to the target, so the following turns extend it again
    assert r.prompt_tokens_estimate <= 0.75 * r.budget.available + 40
    ctx.append([Message(role="assistant", content="next")], turn=t + 1)
    assert not ctx.render(turn=t + 1).compactions


def test_a_tool_output_larger_than_the_window_is_elided(make_context, counter):
    ctx = make_context(s_max=2048, k_max=256)
    huge = tool_turn(1, 2000)
    assert counter.count(huge[1].content) > 2048
    ctx.append(huge, turn=1)
    r = ctx.render(turn=1)
    assert [e.strategy for e in r.compactions] == ["elide_tool_outputs"]
    assert r.prompt_tokens_estimate <= r.budget.available


def test_a_message_larger_than_the_window_that_cannot_be_compacted(make_context):
    ctx = make_context(s_max=2048, k_max=256)
    ctx.append([Message(role="assistant", content=LOG_LINE * 400)], turn=1)
    with pytest.raises(BudgetExhausted) as info:
        ctx.render(turn=1)
    err = info.value
    assert err.limit == "context" and err.context["available"] == 2048 - 256
    assert err.context["estimate"] > err.context["available"]
    # the failed render leaves the context as it was
    assert len(ctx.state.history) == 1 and ctx.state.dropped_turns == 0


def test_a_task_larger_than_the_window(make_context):
    ctx = make_context(s_max=1024, k_max=128, task="Fix this:\n" + LOG_LINE * 200)
    with pytest.raises(BudgetExhausted, match="does not fit even after compaction"):
        ctx.render(turn=0)
