"""Property tests over random trajectories: the budget invariant, exact
extension without compaction, and divergence exactly where compaction says."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from orchestrator.context import (
    Budget,
    CompactionPolicy,
    ContextAssembler,
    Margin,
    MessageCounter,
    PromptBytes,
    TailFormat,
    prefix_report,
)
from orchestrator.contract import Message, ToolCall
from orchestrator.errors import BudgetExhausted

from .conftest import TOOLS

WORDS = "def return self assert None 0x7ffd FAILED tests/test_core.py::test_parse {} [] == -> import os".split()


def text(seed: int, words: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * (seed % 5 + 1)) % len(WORDS)] for i in range(words))


turn_shape = st.tuples(
    st.integers(0, 6),  # text seed: small, so identical messages occur
    st.integers(1, 120),  # assistant words
    st.lists(st.integers(0, 1500), max_size=3),  # tool output sizes in words
)

trajectory = st.fixed_dictionaries(
    {
        "s_max": st.integers(700, 6000),
        "k_max": st.integers(16, 400),
        "target_fill": st.floats(0.4, 1.0),
        "keep": st.integers(0, 1500),
        "margin": st.floats(0.0, 0.3),
        "with_tail": st.booleans(),
        "turns": st.lists(turn_shape, min_size=1, max_size=14),
    }
)


def messages_of(t: int, shape: tuple[int, int, list[int]]) -> list[Message]:
    seed, words, outputs = shape
    calls = tuple(ToolCall(id=f"c{t}_{i}", name="bash", arguments='{"cmd":"pytest"}') for i in range(len(outputs)))
    out = [Message(role="assistant", content=text(seed, words), tool_calls=calls)]
    out += [
        Message(role="tool", tool_call_id=c.id, content=text(seed + i, n))
        for i, (c, n) in enumerate(zip(calls, outputs, strict=True))
    ]
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trajectory)
def test_random_trajectories(counter, case):
    ctx = ContextAssembler(
        system="You are a careful coding agent.",
        task="Make the failing test pass.",
        tools=TOOLS,
        budget=Budget(s_max=case["s_max"], k_max=case["k_max"]),
        counter=counter,
        margin=Margin(ratio=case["margin"], fixed=8),
        policy=CompactionPolicy(
            target_fill=case["target_fill"], keep_head_chars=case["keep"], keep_tail_chars=case["keep"] // 2
        ),
        tail=TailFormat() if case["with_tail"] else None,
    )
    fresh = MessageCounter(counter)
    tail_reserve = fresh.message(TailFormat().reserve_message()) if case["with_tail"] else 0
    previous = None
    for t, shape in enumerate(case["turns"], start=1):
        ctx.append(messages_of(t, shape), turn=t)
        try:
            r = ctx.render(turn=t, turns_left=len(case["turns"]) - t)
        except BudgetExhausted as exc:
            assert exc.limit == "context" and exc.context["estimate"] > exc.context["available"]
            event("budget exhausted")
            return
        # Budget invariant, recounted from scratch so a stale cache cannot hide a breach.
        stable, tail = r.messages[: r.stable_messages], r.messages[r.stable_messages :]
        # The assembler extends its last rendering on append: it must equal the state's own.
        assert stable == ctx.state.messages()
        raw = fresh.request_overhead() + fresh.tools(r.tools) + sum(fresh.message(m) for m in stable)
        raw += max([fresh.message(m) for m in tail] + [tail_reserve]) if tail else 0
        assert raw == r.raw_tokens
        assert ctx.margin.apply(raw) == r.prompt_tokens_estimate <= r.budget.available
        request = r.build_request(model="m")
        prompt = PromptBytes.from_request(request, tail_messages=len(tail))
        if previous is not None:
            prev_r, prev_prompt = previous
            step = prefix_report([prev_prompt, prompt]).turns[1]
            if not r.compactions:
                event("extended")
                if case["with_tail"]:
                    assert step.break_message == prev_r.stable_messages and step.extends_stable
                else:
                    assert step.break_offset is None and step.shared_bytes == prev_prompt.total_bytes
            else:
                event("compacted")
                assert r.first_changed_message == min(e.first_changed_message for e in r.compactions)
                expected = min(r.first_changed_message, prev_r.stable_messages)
                if expected < len(prev_r.messages):
                    assert step.break_message == expected
                else:
                    assert step.break_offset is None
        previous = (r, prompt)
