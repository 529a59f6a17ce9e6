"""The cache comparison's sentences read the right way round (issue 27):
"prefilled 8,561, 0.87x fewer than no cache" said fewer for more. Each
figure is now a share of its reference, true whichever side is larger."""

from __future__ import annotations

from orchestrator.costing import comparison_lines
from orchestrator.costing.trajectory import ChapterComparison


def comparison(prefilled: int, no_cache: int, ideal: int) -> ChapterComparison:
    return ChapterComparison(n=4, s0=1000, delta=200, delta_exact=200.0, sent_tokens=no_cache,
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
