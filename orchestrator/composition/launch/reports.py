"""Cost reports composed: the store reads the figures (``store.read.reports``),
costing prices and aggregates them (``orchestrator.costing``). The CLI,
the viewer, tests and benches get their reports here."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from orchestrator.costing import AggregateReport, RunCost, aggregate, run_cost
from orchestrator.trajectory import Trajectory
from policies.price_table import PriceTable
from store import Store
from store.read.reports import (
    call_figures,
    constraint_of,
    engines_of,
    read_slices,
    run_level_of,
    source_of,
    tool_figures,
)


def trajectory_cost(trajectory: Trajectory, prices: PriceTable, reprice: bool = False) -> RunCost:
    """One recorded run's cost lines: priced, or, an imported run not
    ``reprice``-d, its source's own dollars and run-level figures."""
    calls = sorted((c for record in trajectory.turns for c in record.calls), key=lambda c: c.seq)
    tools = [t for record in trajectory.turns for t in record.tool_executions]
    run = trajectory.run
    run_level, reported = run_level_of(trajectory)
    cost = run_cost(
        run_id=run.id, model=run.request_model, status=run.status, verdict=run.verdict,
        calls=call_figures(calls), tools=tool_figures(tools), prices=prices.lookup, price_version=prices.version,
        source=source_of(trajectory), reprice=reprice, run_level=run_level, reported=reported,
    )
    runtime = run.config.get("sandbox_runtime")
    return cost.model_copy(update={"engines": engines_of(trajectory), "constraint": constraint_of(trajectory),
                                   "last_alive_at": run.last_alive_at,
                                   "sandbox_runtime": runtime if isinstance(runtime, str) else None})


def report_run(store: Store, ref: str, prices: PriceTable, reprice: bool = False) -> RunCost:
    """The cost report of the run ``ref`` names (an id or a unique prefix).
    Its figures come from the run's rows; when its stored totals (what the
    aggregates sum) say otherwise, one of them was altered, and the report
    stops (``RollupMismatch``) rather than disagree with the aggregate."""
    trajectory = store.trajectory(ref)
    store.check_totals(trajectory.run.id)
    return trajectory_cost(trajectory, prices, reprice)


def report_runs(store: Store, *, by: str, since: float | None, until: float | None, prices: PriceTable,
                include_replays: bool = False, raw: bool = False, reprice: bool = False) -> AggregateReport:
    """Runs in a time window, grouped ``by``; real spend only, unless
    ``include_replays``. ``raw``: every run read from its rows, not from its
    stored totals (the bench's comparison)."""
    with collector_paused():
        pieces, ttfts = read_slices(store, by=by, since=since, until=until, include_replays=include_replays, raw=raw)
        return aggregate(pieces, ttfts, by=by, prices=prices.lookup, price_version=prices.version, since=since,
                         until=until, include_replays=include_replays, reprice=reprice)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector held off while an aggregate is read and
    folded: a fleet report makes a few hundred thousand tuples, none in a
    cycle, and the collector's passes over them were a quarter of an
    all-time report's time (bench/bench_report.py). Left as it was found."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
