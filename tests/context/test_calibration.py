import pytest

from orchestrator.context import Margin, calibrate
from orchestrator.errors import ContractError


def test_within_margin_keeps_the_margin():
    margin = Margin(ratio=0.10, fixed=16)
    event = calibrate(turn=3, tokenizer="t", estimated_raw=1000, reported=1090, margin=margin)
    assert event.outcome == "within_margin" and event.margin_after == margin and event.warning is None
    assert event.estimated == 1116 and event.ratio == 1.09


def test_under_estimate_raises_the_margin_with_a_warning():
    event = calibrate(turn=3, tokenizer="t", estimated_raw=1000, reported=1250, margin=Margin(ratio=0.10, fixed=16))
    assert event.outcome == "margin_raised"
    assert "margin ratio raised 0.10 -> 0.26" in event.warning
    assert event.margin_after.apply(1000) >= 1250


def test_a_wild_disagreement_is_a_mismatch():
    low = calibrate(turn=1, tokenizer="t", estimated_raw=1000, reported=2600, margin=Margin())
    assert low.outcome == "mismatch" and "does not fit this model" in low.warning
    assert low.margin_after.apply(1000) >= 2600
    high = calibrate(turn=1, tokenizer="t", estimated_raw=3000, reported=1000, margin=Margin())
    assert high.outcome == "mismatch" and high.margin_after == Margin() and "margin kept" in high.warning


def test_missing_usage_is_refused():
    with pytest.raises(ContractError, match="positive"):
        calibrate(turn=1, tokenizer="t", estimated_raw=1000, reported=0, margin=Margin())


def test_context_applies_a_raised_margin_to_the_next_turn(make_context):
    ctx = make_context(margin=Margin(ratio=0.0, fixed=0))
    first = ctx.render(turn=0)
    event = ctx.calibrate(first, reported_prompt_tokens=int(first.raw_tokens * 1.3))
    assert event.outcome == "margin_raised" and event.turn == 0
    second = ctx.render(turn=1)
    assert second.margin == event.margin_after
    assert second.prompt_tokens_estimate >= int(first.raw_tokens * 1.3)
