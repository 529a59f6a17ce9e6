import pytest

from orchestrator.context import cache_saving_factor, prefill_tokens_ideal_cache, resent_tokens_no_cache


def test_thirty_turn_trajectory():
    assert resent_tokens_no_cache(8_000, 1_500, 30) == 892_500
    assert prefill_tokens_ideal_cache(8_000, 1_500, 30) == 51_500
    assert cache_saving_factor(8_000, 1_500, 30) == pytest.approx(17.33, abs=0.01)


def test_formulas_match_a_turn_by_turn_sum():
    s0, delta, n = 700, 130, 17
    prompts = [s0 + t * delta for t in range(n)]
    assert resent_tokens_no_cache(s0, delta, n) == sum(prompts)
    assert prefill_tokens_ideal_cache(s0, delta, n) == prompts[0] + sum(
        b - a for a, b in zip(prompts, prompts[1:], strict=False)
    )


def test_edge_cases():
    assert resent_tokens_no_cache(8_000, 1_500, 0) == 0
    assert prefill_tokens_ideal_cache(8_000, 1_500, 0) == 0
    assert prefill_tokens_ideal_cache(8_000, 1_500, 1) == resent_tokens_no_cache(8_000, 1_500, 1) == 8_000
    with pytest.raises(ValueError):
        resent_tokens_no_cache(-1, 1, 1)
