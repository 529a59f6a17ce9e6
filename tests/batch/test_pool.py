"""The local pool on real sandboxes, the keyed fault server playing each task's known fix."""

from __future__ import annotations

import pytest

from orchestrator.composition.batch.driver import BatchPlan, run_batch, start_batch
from orchestrator.composition.batch.pool import PoolOptions
from orchestrator.composition.batch.tasks import load_task_file
from store import Store
from store.read import liveness
from store.write import batches as bstore
from tests.batch.conftest import EXAMPLES

pytestmark = [pytest.mark.docker]


def test_pool_runs_tasks_to_pass_each_with_its_own_script(settings, fault_server, fix_scripts):
    task_file = load_task_file(EXAMPLES / "tasks.jsonl")
    chosen = ("calc-mean", "roman-four", "kv-split-once")
    subset = task_file.model_copy(update={"tasks": tuple(t for t in task_file.tasks if t.id in chosen)})
    for task_id in chosen:
        fault_server.script_for(task_id, fix_scripts[task_id])
    url = f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1"
    with Store.open(settings.store_url) as store:
        plan = BatchPlan(tasks_dir=str(EXAMPLES), model_urls=(url,), options=PoolOptions(workers=2, start_slots=1))
        batch_id = start_batch(store, subset, plan)
        results = run_batch(store, settings, batch_id)
        assert {r.task_id: r.verdict for r in results} == {t: "PASS" for t in chosen}, results
        view = bstore.load_batch(store, batch_id)
        assert view.pending() == [] and len(view.attempts) == 3
        for attempt in view.attempts:
            assert store.run(attempt.run_id).verdict == "PASS" and store.verify(attempt.run_id).ok
            assert attempt.run_id not in liveness.crashed_runs(store)
    # Each task's requests came under its own key, as many as its script has steps.
    calls = [r.path for r in fault_server.requests if r.path.endswith("/chat/completions")]
    assert sorted(calls) == sorted(f"/k/{t}/v1/chat/completions" for t in chosen for _ in fix_scripts[t])
