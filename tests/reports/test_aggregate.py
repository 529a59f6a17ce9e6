"""Aggregates over many runs: groups, windows, p50/p95, and agreement with
the per-run reports of the same store."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import update

from orchestrator.composition.launch.reports import report_run, report_runs
from orchestrator.contract import Message, ModelRequest
from orchestrator.costing import percentile
from orchestrator.costing.aggregate import group_stats
from orchestrator.costing.figures import RunSlice, percentile_of_counts
from policies.price_table import load_price_table, set_price
from policies.pricing import CostBreakdown, Price, cost_breakdown
from store import Recorder
from store.read import liveness
from store.schema.tables import RunLease, table_of

DAY = 86_400.0
T0 = 1_790_000_000.0  # a fixed UTC instant, so days are known


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=2, max_size=50))
def test_percentile_matches_the_standard_library(values: list[float]) -> None:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    assert percentile(values, 50) == pytest.approx(cuts[49], abs=1e-6)
    assert percentile(values, 95) == pytest.approx(cuts[94], abs=1e-6)


@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 20)), max_size=30), st.sampled_from([0, 5, 50, 95, 100]))
def test_percentile_of_a_histogram_is_the_percentile_of_its_values(counts: list[tuple[int, int]], q: int) -> None:
    expanded = [float(v) for v, n in counts for _ in range(n)]
    got = percentile_of_counts([(float(v), n) for v, n in counts], q)
    assert (got is None and not expanded) or got == pytest.approx(percentile(expanded, q))


PIECE = st.tuples(st.sampled_from(["r1", "r2", "r3"]), st.sampled_from(["m1", "m2", "free"]),
                  st.integers(0, 10**7), st.integers(0, 10**7), st.integers(0, 10**6),
                  st.floats(0, 1e5, allow_nan=False))


@given(st.lists(PIECE, min_size=1, max_size=40))
def test_group_cost_is_the_sum_of_each_slices_breakdown_bit_for_bit(pieces: list[tuple[object, ...]]) -> None:
    """The costing core sums plain floats: the same sums, in the same order,
    as adding one ``CostBreakdown`` a slice (the definition it replaced)."""
    prices = {"m1": Price(model="m1", input_per_mtok=2.5, cached_input_per_mtok=0.3, output_per_mtok=10.1,
                          gpu_per_hour=3.7),
              "m2": Price(model="m2", input_per_mtok=0.15, output_per_mtok=0.6)}
    slices = [RunSlice(run_id=r, created_at=T0, status="finished", verdict=None, model=m, calls=1, prompt_tokens=p,
                       cached_tokens=min(c, p), completion_tokens=o, gpu_s=g, decode_s=0.0, retries=0)
              for r, m, p, c, o, g in pieces]  # type: ignore[misc]
    stats = group_stats("g", slices, [], prices.get)
    want, per_run = CostBreakdown(), dict.fromkeys(("r1", "r2", "r3"), 0.0)
    for s in slices:
        piece = cost_breakdown(s.prompt_tokens, s.cached_tokens, s.completion_tokens, s.gpu_s, prices.get(s.model))
        want, per_run[s.run_id] = want + piece, per_run[s.run_id] + piece.total_usd
    assert stats.cost == want
    assert stats.cost_per_run.p95 == percentile([v for r, v in per_run.items() if r in {s.run_id for s in slices}], 95)


def test_percentile_edges() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0


@pytest.fixture
def fleet(scripted, home: Path) -> dict[str, list[str]]:
    """Runs over three days, two models, three verdicts."""
    set_price(home, "gemma-3-270m", {"input_per_mtok": 1.0, "output_per_mtok": 4.0, "gpu_per_hour": 1.8})
    set_price(home, "big", {"input_per_mtok": 5.0, "cached_input_per_mtok": 0.5, "output_per_mtok": 20.0})
    runs: dict[str, list[str]] = {}
    for i in range(9):
        now = T0 + (i % 3) * DAY + i
        scripted.recorder = Recorder(scripted.store, clock=lambda now=now: now)
        model = "big" if i % 2 else "gemma-3-270m"
        turns = [scripted.Turn(1000 + 100 * i + 50 * t, 900 if t else 0, 30 + i, model=model) for t in range(1 + i % 4)]
        verdict = ("PASS", "FAIL", None)[i % 3]
        run_id = scripted.record(turns, model=model, verdict=verdict)
        runs.setdefault(model, []).append(run_id)
        runs.setdefault(f"day{i % 3}", []).append(run_id)
        runs.setdefault(str(verdict), []).append(run_id)
    return runs


def test_groups_agree_with_per_run_reports(scripted, home: Path, fleet: dict[str, list[str]]) -> None:
    prices = load_price_table(home)
    report = report_runs(scripted.store, by="model", since=None, until=None, prices=prices)
    assert [g.key for g in report.groups] == ["big", "gemma-3-270m"]
    for group in report.groups:
        singles = [report_run(scripted.store, r, prices) for r in fleet[group.key]]
        assert group.runs == len(singles)
        assert group.prompt_tokens == sum(s.total.prompt_tokens for s in singles)
        assert group.cached_tokens == sum(s.total.cached_tokens for s in singles)
        assert group.completion_tokens == sum(s.total.completion_tokens for s in singles)
        assert group.tool_s == pytest.approx(sum(s.total.tool_s for s in singles))
        assert group.cost.total_usd == pytest.approx(sum(s.total.cost.total_usd for s in singles))
        per_run = [s.total.cost.total_usd for s in singles]
        assert group.cost_per_run.p50 == pytest.approx(statistics.median(per_run))
        assert group.cost_per_run.p95 == pytest.approx(statistics.quantiles(per_run, n=100, method="inclusive")[94])
    assert report.total is not None and report.total.runs == 9
    assert report.total.cost.total_usd == pytest.approx(sum(g.cost.total_usd for g in report.groups))


def test_by_day_status_and_verdict(scripted, home: Path, fleet: dict[str, list[str]]) -> None:
    prices = load_price_table(home)
    by_day = report_runs(scripted.store, by="day", since=None, until=None, prices=prices)
    assert [(g.key, g.runs) for g in by_day.groups] == [("2026-09-21", 3), ("2026-09-22", 3), ("2026-09-23", 3)]
    by_verdict = report_runs(scripted.store, by="verdict", since=None, until=None, prices=prices)
    assert {g.key: g.runs for g in by_verdict.groups} == {"PASS": 3, "FAIL": 3, "(none)": 3}
    by_status = report_runs(scripted.store, by="status", since=None, until=None, prices=prices)
    assert {g.key: g.runs for g in by_status.groups} == {"finished": 6, "running": 3}
    # TTFTs travel on their slices: every group has its calls' histogram
    # (bucketed: within 1/32 of the value, docs/SCHEMA.md).
    for report in (by_day, by_verdict, by_status):
        assert all(g.ttft_s.p50 == pytest.approx(0.1, rel=1 / 32) for g in report.groups)


def test_by_status_reads_a_run_whose_owner_is_gone_as_crashed(scripted, home: Path,
                                                             fleet: dict[str, list[str]]) -> None:
    """As in ``runs`` and ``show``: of the three running runs, one holds a live
    lease and one a lapsed one; the lapsed one, and its calls' TTFTs, group
    under ``crashed``."""
    alive, gone = fleet["None"][:2]
    liveness.take_lease(scripted.store, alive, "host:1", 3600.0)
    liveness.take_lease(scripted.store, gone, "host:2", 3600.0)
    with scripted.store.write() as conn:
        conn.execute(update(table_of(RunLease)).where(table_of(RunLease).c.run_id == gone).values(expires_at=T0))
    prices = load_price_table(home)
    by_status = report_runs(scripted.store, by="status", since=None, until=None, prices=prices)
    assert {g.key: g.runs for g in by_status.groups} == {"finished": 6, "running": 2, "crashed": 1}
    crashed = next(g for g in by_status.groups if g.key == "crashed")
    single = report_run(scripted.store, gone, prices)
    assert crashed.prompt_tokens == single.total.prompt_tokens
    assert crashed.ttft_s.p50 == pytest.approx(0.1, rel=1 / 32)


def test_since_and_until_select_runs_by_start_time(scripted, home: Path, fleet: dict[str, list[str]]) -> None:
    prices = load_price_table(home)
    window = report_runs(scripted.store, by="day", since=T0 + DAY, until=T0 + 2 * DAY, prices=prices)
    assert [(g.key, g.runs) for g in window.groups] == [("2026-09-22", 3)]
    empty = report_runs(scripted.store, by="model", since=T0 + 10 * DAY, until=None, prices=prices)
    assert empty.groups == () and empty.total is None


def test_ttft_percentiles_are_over_calls(scripted, home: Path) -> None:
    for ttft in (0.1, 0.2, 0.3, 0.4, 1.0):
        run_id = scripted.recorder.start_run(task="t", repo="/r", model="m", config={}, policy={})
        with scripted.recorder.turn(run_id, 0) as tx:
            call = tx.request(ModelRequest(model="m", messages=(Message(role="user", content="x"),), max_tokens=8))
            tx.envelope(call, scripted.envelope(10, 0, 1, ttft=ttft, model="m"))
            tx.commit([])
    report = report_runs(scripted.store, by="model", since=None, until=None, prices=load_price_table(home))
    (group,) = report.groups
    assert group.ttft_s.p50 == pytest.approx(0.3, rel=1 / 32) and group.ttft_s.p95 == pytest.approx(0.88, rel=1 / 32)
    assert any("'m'" in w for w in report.warnings)


def test_by_day_labels_each_piece_as_its_own_datetime_does_at_the_edges_of_a_day() -> None:
    """The day label is made once a day, except within a second of midnight,
    where datetime's rounding to microseconds may move a time to the next day."""
    from orchestrator.costing.aggregate import aggregate
    from orchestrator.costing.figures import day_key

    midnight = 1_790_035_200.0  # a UTC midnight
    moments = [midnight - 1e-7, midnight - 0.5, midnight, midnight + 0.2, midnight + 3600, midnight - 3600]
    pieces = [RunSlice(run_id=f"r{i}", created_at=t, status="finished", verdict=None, model="m", calls=1,
                       prompt_tokens=1, cached_tokens=0, completion_tokens=1, gpu_s=0.0, decode_s=0.0, retries=0)
              for i, t in enumerate(moments)]
    report = aggregate(pieces, [], by="day", prices=lambda model: None, price_version="v")
    want: dict[str, int] = {}
    for t in moments:
        want[day_key(t)] = want.get(day_key(t), 0) + 1
    assert {g.key: g.runs for g in report.groups} == want


def test_an_aggregate_holds_off_the_cycle_collector_and_leaves_it_as_it_found_it(store, monkeypatch) -> None:
    """``report_runs`` reads and folds with the collector off (bench_report's
    figures), and gives it back on, or off if it was, also when it fails."""
    import gc

    from orchestrator.composition.launch import reports
    from policies.price_table import PriceTable

    seen: list[bool] = []
    real = reports.read_slices

    def reading(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(reports, "read_slices", reading)
    table = PriceTable(version="t", sources=(), prices={})
    assert gc.isenabled()
    reports.report_runs(store, by="model", since=None, until=None, prices=table)
    assert seen == [False] and gc.isenabled()
    with pytest.raises(ValueError):
        reports.report_runs(store, by="no-such-grouping", since=None, until=None, prices=table)
    assert gc.isenabled()
    gc.disable()
    try:
        reports.report_runs(store, by="model", since=None, until=None, prices=table)
        assert not gc.isenabled()
    finally:
        gc.enable()
