"""Budgets and compaction through the real Agent and Context: each run limit
(turns, tokens, cost, wall time, the context window) ends the run as
BUDGET_EXHAUSTED naming the limit, checked before the next request; compaction
rewrites only the context, is recorded before the request it shapes, and
keeps the prefix before its first change byte-identical."""

from __future__ import annotations

import pytest

from orchestrator.agent import Verdict
from orchestrator.context import CompactionPolicy
from orchestrator.limits import Tally
from policies import RunLimits, default_policy
from tests.loop.fakes import MemoryTools, build, call, completed

POLICY = default_policy()
LIMITS = RunLimits(max_turns=30, max_tokens=200_000, max_cost_usd=1.0, max_wall_s=1800)


def _bash(**usage):
    return completed(call("bash", {"command": "make"}), **usage)


def _limits(**update) -> RunLimits:
    return LIMITS.model_copy(update=update)


def test_the_turn_limit_stops_before_a_request_it_does_not_allow():
    loop = build([_bash() for _ in range(3)], policy=POLICY, limits=_limits(max_turns=2))
    result = loop.agent.run()
    assert (result.verdict, result.turns) == (Verdict.BUDGET_EXHAUSTED, 2)
    assert result.detail.startswith("turns: ") and len(loop.model.requests) == 2


def test_the_token_limit_counts_prompt_and_completion_tokens():
    loop = build([_bash(prompt_tokens=600, completion_tokens=50), _bash(prompt_tokens=700, completion_tokens=60),
                  _bash()], policy=POLICY, limits=_limits(max_tokens=1400))
    result = loop.agent.run()
    assert (result.verdict, result.tokens) == (Verdict.BUDGET_EXHAUSTED, 1410)
    assert result.detail.startswith("tokens: ") and len(loop.model.requests) == 2


def test_the_cost_limit_uses_the_cost_of_each_envelope_and_records_it():
    priced = iter([0.25, 0.5, 0.375, 9.0])
    loop = build([_bash() for _ in range(4)], policy=POLICY, limits=_limits(max_cost_usd=1.0),
                 cost_of=lambda envelope: next(priced))
    result = loop.agent.run()
    assert (result.verdict, result.cost_usd, result.turns) == (Verdict.BUDGET_EXHAUSTED, 1.125, 3)
    assert result.detail.startswith("cost: ")
    assert [cost for _, _, cost in loop.journal.envelopes] == [0.25, 0.5, 0.375]


def test_the_wall_time_limit_reads_the_runs_clock():
    now = [100.0]
    loop = build([], policy=POLICY, limits=_limits(max_wall_s=25))

    def slow(request):
        now[0] += 10  # each model call takes 10 s of the run's clock
        return _bash()

    loop.model.script = [slow, slow, slow, slow]
    loop.agent.tally = Tally(loop.agent.tally.limits, clock=lambda: now[0])
    result = loop.agent.run()
    assert (result.verdict, result.turns) == (Verdict.BUDGET_EXHAUSTED, 3)
    assert result.detail.startswith("wall_time: ") and len(loop.model.script) == 1


def test_a_prompt_that_cannot_fit_the_window_is_never_sent():
    loop = build([_bash()], policy=POLICY, s_max=400, k_max=100)
    result = loop.agent.run()
    assert result.verdict is Verdict.BUDGET_EXHAUSTED and result.detail.startswith("context: ")
    assert loop.model.requests == [] and loop.journal.requests == []


def test_an_output_too_big_to_compact_ends_the_run_on_the_context_limit():
    tools = MemoryTools(POLICY, bash_output="y" * 12_000)  # ~3000 tokens in a 2344-token window
    loop = build([_bash(), _bash()], policy=POLICY, tools=tools, s_max=2600, k_max=256,
                 compaction=CompactionPolicy(keep_head_chars=100_000))
    result = loop.agent.run()
    assert result.verdict is Verdict.BUDGET_EXHAUSTED and result.detail.startswith("context: ")
    assert len(loop.model.requests) == 1  # the newest turn is never dropped, so nothing fits


def _big_outputs(compaction: CompactionPolicy, turns: int = 3):
    tools = MemoryTools(POLICY, bash_output="y" * 4000)  # ~1000 tokens each
    loop = build([_bash() for _ in range(turns)], policy=POLICY, tools=tools, s_max=2900, k_max=256,
                 compaction=compaction, limits=_limits(max_turns=turns))
    assert loop.agent.run().verdict is Verdict.BUDGET_EXHAUSTED
    return loop


def _compactions(loop):
    return [(turn, data) for turn, kind, data in loop.journal.events if kind == "compaction"]


def test_compaction_elides_old_tool_outputs_and_is_recorded_before_the_request():
    loop = _big_outputs(CompactionPolicy())
    ((turn, event),) = _compactions(loop)
    assert turn == 2 and event["strategy"] == "elide_tool_outputs" and event["tokens_after"] < event["tokens_before"]
    log = loop.journal.log
    assert log.index("event compaction") < log.index("request 2")
    before, after = loop.model.requests[1].messages, loop.model.requests[2].messages
    first = event["first_changed_message"]
    assert after[:first] == before[:first] and after[first] != before[first]
    elided = [m.content for m in after if m.role == "tool"]
    assert len(elided) == 2 and all("characters elided to fit the context window" in c for c in elided)
    assert all(len(c) < 4000 for c in elided)
    # The journal keeps what the tool really said; only the context is shortened.
    assert all(len(c.tool[3].observation) == 4000 for c in loop.journal.candidates)


def test_compaction_drops_the_oldest_turns_when_eliding_cannot_help():
    loop = _big_outputs(CompactionPolicy(keep_head_chars=100_000), turns=4)
    events = _compactions(loop)
    assert [(turn, e["strategy"]) for turn, e in events] == [(2, "drop_oldest_turns"), (3, "drop_oldest_turns")]
    last = loop.model.requests[3].messages
    assert last[2].role == "user" and last[2].content.startswith("[2 earlier turns were removed")
    ids = [m.tool_call_id for m in last if m.role == "tool"]
    assert ids == ["call_2_0"]  # the newest turn is kept whole
    # Dropping rewrites history from the marker on, never the pinned system and task.
    assert last[:2] == loop.model.requests[0].messages[:2]


@pytest.mark.parametrize("reported, grows", [(2000, True), (10, False)])
def test_server_usage_calibrates_the_margin_and_is_recorded(reported, grows):
    loop = build([_bash(prompt_tokens=reported, server_usage=True), _bash()], policy=POLICY,
                 limits=_limits(max_turns=2))
    loop.agent.run()
    (event,) = loop.journal.of_kind("calibration")
    assert event["reported"] == reported and event["turn"] == 0
    before, after = event["margin_before"], event["margin_after"]
    assert (after["ratio"] > before["ratio"]) is grows
    log = loop.journal.log
    assert log.index("envelope 0") < log.index("event calibration") < log.index("request 1")
