"""Cost figures that must not count what was never spent: a failed call with
no usage is no 0-token prompt in the cache comparison, and GPU time is the
server's time, the client's retry backoff shown apart as waiting."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.composition.launch.reports import report_run, report_runs
from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.costing import CallFigures, cache_comparison, run_cost
from orchestrator.envelope import Attempt, Envelope, ErrorDetail, Payload, Status, Timings, Usage
from policies.price_table import load_price_table, set_price
from store import Recorder, Store


def answered(turn: int, prompt: int) -> CallFigures:
    return CallFigures(turn=turn, model="m", status="COMPLETED", prompt_tokens=prompt, prompt_source="server")


FAILED = CallFigures(turn=2, model="m", status="TRANSPORT_FAILURE", prompt_tokens=0, prompt_source="absent")


def test_a_call_without_usage_is_left_out_of_the_cache_comparison() -> None:
    calls = [answered(0, 1000), answered(1, 1100), FAILED]
    comparison = cache_comparison(calls)
    assert comparison is not None
    assert (comparison.n, comparison.s0, comparison.delta) == (2, 1000, 100)
    assert "shrank" not in comparison.derivation and "1 without usage left out" in comparison.derivation
    # With linear growth, "no cache" prefills exactly what was sent, never more.
    assert comparison.no_cache_tokens == comparison.sent_tokens == 2100


def test_a_transport_failure_run_has_no_comparison_and_resends_nothing() -> None:
    report = run_cost(run_id="r", model="m", status="finished", verdict="TRANSPORT_FAILURE",
                      calls=[answered(0, 1000), FAILED, answered(3, 1200)], tools=[], prices=lambda m: None,
                      price_version="t")
    assert report.comparison is not None and report.comparison.n == 2
    assert [line.resent_tokens for line in report.turns] == [0, 0, 1000]
    only_failed = run_cost(run_id="r", model="m", status="finished", verdict="TRANSPORT_FAILURE", calls=[FAILED],
                           tools=[], prices=lambda m: None, price_version="t")
    assert only_failed.comparison is None


def retried_envelope() -> Envelope:
    """Two HTTP attempts (11 ms, then 22 ms) with a second of backoff between:
    1.058 s on the client's clock, 0.033 s on the server's."""
    return Envelope(
        status=Status.COMPLETED, payload=Payload(text="done"), finish_reason="stop", http_status=200, model="m",
        usage=Usage(prompt_tokens=100, completion_tokens=10, prompt_source="server", completion_source="server"),
        timings=Timings(ttft_s=0.02, decode_s=0.002, total_s=1.058),
        attempts=(
            Attempt(number=1, status=Status.TRANSPORT_FAILURE, http_status=503, duration_s=0.011, backoff_s=1.0,
                    error=ErrorDetail(kind="http_503", message="busy")),
            Attempt(number=2, status=Status.COMPLETED, http_status=200, duration_s=0.022),
        ),
    )


def test_gpu_seconds_charge_server_time_and_show_backoff_as_waiting(home: Path, store: Store) -> None:
    set_price(home, "m", {"gpu_per_hour": 3600.0})  # $1 per GPU-second
    recorder = Recorder(store)
    run_id = recorder.start_run(task="t", repo="/r", model="m", config={}, policy={})
    with recorder.turn(run_id, 0) as tx:
        request = ModelRequest(model="m", messages=(Message(role="user", content="hi"),), max_tokens=16,
                               sampling=Sampling())
        tx.envelope(tx.request(request), retried_envelope())
    recorder.finish_run(run_id, "PASS")
    prices = load_price_table(home)
    single = report_run(store, run_id, prices)
    assert single.total.gpu_s == pytest.approx(0.033) and single.total.wait_s == pytest.approx(1.0)
    assert single.total.cost.gpu_usd == pytest.approx(0.033)
    (group,) = report_runs(store, by="model", since=None, until=None, prices=prices).groups
    assert group.gpu_s == pytest.approx(0.033) and group.wait_s == pytest.approx(1.0)
    assert group.cost.gpu_usd == pytest.approx(0.033)
