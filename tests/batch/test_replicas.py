"""A model replica that goes away: its run ends TRANSPORT_FAILURE, the replica
is drained, and the task moves to the other replica, the move recorded; the
model is not charged with a failure."""

from __future__ import annotations

import pytest

from orchestrator.adapters.fault_server import FaultServer
from orchestrator.composition.batch.driver import BatchPlan, run_batch, start_batch
from orchestrator.composition.batch.pool import PoolOptions
from orchestrator.composition.batch.tasks import load_task_file
from store import Store
from store.write import batches as bstore
from tests.batch.conftest import EXAMPLES

pytestmark = [pytest.mark.docker]


def test_a_replica_that_goes_away_is_drained_and_its_task_moves(settings, fix_scripts, sandbox_image):
    chosen = ("clamp-bounds", "median-even")
    task_file = load_task_file(EXAMPLES / "tasks.jsonl")
    subset = task_file.model_copy(update={"tasks": tuple(t for t in task_file.tasks if t.id in chosen)})
    with FaultServer() as gone, FaultServer() as live:
        for task_id in chosen:
            live.script_for(task_id, fix_scripts[task_id])
        gone_url = f"http://127.0.0.1:{gone.port}/k/{{task_id}}/v1"
        live_url = f"http://127.0.0.1:{live.port}/k/{{task_id}}/v1"
        gone.stop()  # nothing listens there any more
        fast = settings.model_copy(update={"deadline_s": 10.0})
        with Store.open(settings.store_url) as store:
            plan = BatchPlan(tasks_dir=str(EXAMPLES), model_urls=(gone_url, live_url),
                             options=PoolOptions(workers=1, infra_retries=1))
            batch_id = start_batch(store, subset, plan)
            results = run_batch(store, fast, batch_id)
            view = bstore.load_batch(store, batch_id)
            first = [a for a in view.attempts if a.replica == gone_url]
            assert len(first) == 1 and first[0].outcome == bstore.INFRASTRUCTURE
            assert "went away" in first[0].error and store.run(first[0].run_id).verdict == "TRANSPORT_FAILURE"
    assert [r.verdict for r in results] == ["PASS", "PASS"]
    moved = [a for a in view.attempts if a.task_id == first[0].task_id]
    assert [(a.replica, a.outcome) for a in moved] == [(gone_url, "infrastructure"), (live_url, "model")]
    assert all(a.replica == live_url for a in view.attempts if a.outcome == bstore.MODEL)
