"""Replica placement: least-loaded, sticky for a run's life, drained replicas skipped."""

from __future__ import annotations

import pytest

from orchestrator.composition.batch.live_counts import BatchProgress
from orchestrator.composition.batch.placement import NoReplica, ReplicaPool
from orchestrator.composition.batch.runner import AttemptResult


def test_least_loaded_then_order_given():
    pool = ReplicaPool(["a", "b", "a"])
    assert pool.urls == ["a", "b"]
    assert [pool.acquire() for _ in range(3)] == ["a", "b", "a"]
    pool.release("a")
    pool.release("a")
    assert pool.acquire() == "a"  # a has 0 in flight, b has 1


def test_a_drained_replica_gets_no_new_runs_and_none_left_is_an_error():
    pool = ReplicaPool(["a", "b"])
    pool.drain("a")
    assert {pool.acquire() for _ in range(3)} == {"b"}
    pool.drain("b")
    with pytest.raises(NoReplica):
        pool.acquire()


def test_progress_counts_outcomes_apart_and_estimates_the_rest():
    now = [0.0]
    progress = BatchProgress(4, clock=lambda: now[0])
    assert progress.eta_s() is None
    now[0] = 10.0
    progress.attempt(AttemptResult(task_id="a", outcome="model", verdict="PASS", run_id="r", cost_usd=0.5))
    progress.attempt(AttemptResult(task_id="b", outcome="infrastructure", verdict="INFRA_ERROR",
                                   run_id=None))
    progress.attempt(AttemptResult(task_id="c", outcome="model", verdict="FAULTED", run_id="s"))
    assert (progress.passed, progress.failed, progress.infra, progress.finished) == (1, 1, 1, 2)
    assert progress.eta_s() == 10.0  # 5 s per finished task, two left
    assert "infra errors 1" in progress.line(2) and "$0.5000" in progress.line(2)


def test_the_progress_line_fits_80_columns_and_says_no_zero_infrastructure_count():
    progress = BatchProgress(1000, clock=lambda: 0.0)
    progress.attempt(AttemptResult(task_id="a", outcome="model", verdict="PASS", run_id="r", cost_usd=12.5))
    line = progress.line(256)
    assert "infra" not in line and len(line) + 2 <= 80  # the spinner takes two columns
