"""One run's cost report, read from a real store recorded through the Recorder."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.composition.launch.reports import report_run
from orchestrator.contract import Message, ModelRequest
from orchestrator.costing import CallFigures, cache_comparison, resent_per_call
from policies.price_table import load_price_table, set_price
from store import RunNotFound


def test_per_turn_figures_of_a_recorded_run(scripted, home: Path) -> None:
    set_price(
        home,
        "gemma-3-270m",
        {"input_per_mtok": 2.0, "cached_input_per_mtok": 0.5, "output_per_mtok": 10.0, "gpu_per_hour": 3.6},
    )
    run_id = scripted.record(scripted.GROWING)
    report = report_run(scripted.store, run_id[:10], load_price_table(home))
    turns = report.turns
    assert [t.turn for t in turns] == [0, 1, 2, 3]
    assert [t.prompt_tokens for t in turns] == [1000, 1200, 1400, 1600]
    assert [t.cached_tokens for t in turns] == [0, 1000, 1200, 0]
    assert [t.prefilled_tokens for t in turns] == [1000, 200, 200, 1600]
    assert [t.resent_tokens for t in turns] == [0, 1000, 1200, 1400]
    assert [t.retries for t in turns] == [0, 1, 0, 0]
    assert [t.tool_calls for t in turns] == [1, 1, 1, 0]
    assert turns[1].hit_ratio == pytest.approx(1000 / 1200)
    total = report.total
    assert (total.prompt_tokens, total.cached_tokens, total.completion_tokens, total.resent_tokens) == (
        5200,
        2200,
        230,
        3600,
    )
    assert (
        total.tool_s == pytest.approx(0.75)
        and total.gpu_s == pytest.approx(2.8)
        and total.decode_s == pytest.approx(2.0)
    )
    # By hand: 3000 prefilled x $2/M + 2200 cached x $0.5/M + 230 out x $10/M + 2.8 s x $3.6/h.
    assert total.cost.input_usd == pytest.approx(0.006)
    assert total.cost.cached_input_usd == pytest.approx(0.0011)
    assert total.cost.output_usd == pytest.approx(0.0023)
    assert total.cost.gpu_usd == pytest.approx(0.0028)
    assert total.cost.total_usd == pytest.approx(0.0122)
    assert report.price_version.startswith(load_price_table(None).version + "+local.")
    assert report.verdict == "PASS" and report.warnings == ()


def test_cache_comparison_of_a_recorded_run(scripted, home: Path) -> None:
    report = report_run(scripted.store, scripted.record(scripted.GROWING), load_price_table(home))
    c = report.comparison
    assert c is not None
    assert (c.n, c.s0, c.delta) == (4, 1000, 200)
    assert c.sent_tokens == c.no_cache_tokens == 4 * 1000 + 200 * 4 * 3 // 2
    assert c.ideal_cache_tokens == 1000 + 3 * 200
    assert c.prefilled_tokens == 3000
    assert "S0 = 1000, the first call's prompt tokens" in c.derivation and "mean growth" in c.derivation


def test_cache_figures_for_the_thirty_turn_trajectory() -> None:
    figures = [
        CallFigures(
            turn=t,
            model="m",
            status="COMPLETED",
            prompt_source="server",
            prompt_tokens=8000 + 1500 * t,
            cached_prompt_tokens=8000 + 1500 * (t - 1) if t else 0,
            completion_tokens=200,
        )
        for t in range(30)
    ]
    c = cache_comparison(figures)
    assert c is not None
    assert (c.no_cache_tokens, c.ideal_cache_tokens) == (892_500, 51_500)
    assert c.sent_tokens == 892_500 and c.prefilled_tokens == 51_500  # a perfect cache meets the ideal
    assert c.saving_vs_no_cache == pytest.approx(892_500 / 51_500)
    assert resent_per_call(figures)[1:] == [8000 + 1500 * (t - 1) for t in range(1, 30)]


def test_shrinking_prompt_clamps_delta_and_says_so() -> None:
    figures = [
        CallFigures(turn=t, model="m", status="COMPLETED", prompt_tokens=p, prompt_source="server")
        for t, p in enumerate([3000, 1000])
    ]
    c = cache_comparison(figures)
    assert c is not None and c.delta == 0 and "clamped at 0" in c.derivation


def test_unpriced_model_costs_zero_with_a_warning(scripted, home: Path) -> None:
    run_id = scripted.record([scripted.Turn(500, 0, 20, model="mystery-7b")], model="mystery-7b")
    report = report_run(scripted.store, run_id, load_price_table(home))
    assert report.total.cost.total_usd == 0.0
    assert len(report.warnings) == 1 and "mystery-7b" in report.warnings[0] and "$0" in report.warnings[0]


def test_call_in_flight_is_listed_but_not_priced(scripted, home: Path) -> None:
    run_id = scripted.record(scripted.GROWING[:2], verdict=None)
    request = ModelRequest(model="gemma-3-270m", messages=(Message(role="user", content="again"),), max_tokens=16)
    scripted.recorder.turn(run_id, 2).request(request)  # never committed: in flight
    report = report_run(scripted.store, run_id, load_price_table(home))
    assert report.turns[-1].statuses == ("IN_FLIGHT",) and report.turns[-1].prompt_tokens == 0
    assert report.comparison is not None and report.comparison.n == 2


def test_unknown_run_is_a_typed_error(scripted, home: Path) -> None:
    scripted.record(scripted.GROWING[:1])
    with pytest.raises(RunNotFound):
        report_run(scripted.store, "ffffffffffff", load_price_table(home))
