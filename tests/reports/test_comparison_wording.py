"""The cache comparison's sentences read the right way round (issue 27):
"prefilled 8,561, 0.87x fewer than no cache" said fewer for more. Each
figure is now a share of its reference, true whichever side is larger."""

from __future__ import annotations

from orchestrator.costing import comparison_lines
from orchestrator.costing.run_cost import CacheComparison


def comparison(prefilled: int, no_cache: int, ideal: int) -> CacheComparison:
    return CacheComparison(n=4, s0=1000, delta=200, delta_exact=200.0, sent_tokens=no_cache,
                             prefilled_tokens=prefilled, no_cache_tokens=no_cache, ideal_cache_tokens=ideal,
                             derivation="N = 4")


def test_more_prefilled_than_no_cache_is_not_called_fewer() -> None:
    text = " ".join(comparison_lines(comparison(prefilled=8561, no_cache=7448, ideal=1600)))
    assert "fewer" not in text
    assert "Actually prefilled (prompt - cached): 8,561, 115% of that." in text
    assert "= 1,600; prefilled is 5.35 times that." in text


def test_a_saving_reads_as_a_share() -> None:
    text = " ".join(comparison_lines(comparison(prefilled=3000, no_cache=5200, ideal=1600)))
    assert "3,000, 58% of that." in text and "1.88 times that" in text


def test_a_server_that_sends_no_cached_count_leaves_the_prefill_absent() -> None:
    """llama-cpp-python sends no cached count: the prefill is not known, so
    the comparison says absent rather than prompt - 0, and gives no ratio."""
    from orchestrator.costing.figures import CallFigures
    from orchestrator.costing.run_cost import cache_comparison

    def call(prompt: int, cached_absent: bool) -> CallFigures:
        return CallFigures(turn=0, model="m", status="COMPLETED", prompt_tokens=prompt, prompt_source="server",
                           completion_tokens=10, absent=frozenset({"cached_tokens"}) if cached_absent else frozenset())

    unknown = cache_comparison([call(427, True), call(568, True)])
    assert unknown is not None and unknown.prefilled_tokens is None
    assert unknown.saving_vs_no_cache is None and unknown.excess_over_ideal is None
    text = " ".join(comparison_lines(unknown))
    assert "Actually prefilled (prompt - cached): absent, as the server reported no cached count." in text
    assert "times that" not in text
    known = cache_comparison([call(427, True), call(568, False)])  # one call reported it (0): counted
    assert known is not None and known.prefilled_tokens == 427 + 568
