"""Infrastructure failures are retried and reported apart from the model's
verdicts: dockerd unavailable for one task's sandbox start, through a real
proxy socket that refuses connections."""

from __future__ import annotations

import pytest

from orchestrator.composition.batch.driver import BatchPlan, run_batch, start_batch
from orchestrator.composition.batch.pool import PoolOptions
from orchestrator.composition.batch.report import batch_report
from orchestrator.composition.batch.runner import INFRASTRUCTURE_FAILURE
from orchestrator.composition.batch.tasks import load_task_file
from store import Store
from store.write import batches as bstore
from tests.batch.conftest import EXAMPLES
from tests.batch.docker_proxy import FlakyDockerProxy

pytestmark = [pytest.mark.docker]


def subset(ids):
    task_file = load_task_file(EXAMPLES / "tasks.jsonl")
    return task_file.model_copy(update={"tasks": tuple(t for t in task_file.tasks if t.id in ids)})


def test_dockerd_away_for_one_start_is_retried_and_never_a_model_verdict(tmp_path, settings, fault_server,
                                                                         fix_scripts, docker_client):
    chosen = ("leap-400", "dedupe-order")
    for task_id in chosen:
        fault_server.script_for(task_id, fix_scripts[task_id])
    url = f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1"
    with FlakyDockerProxy(tmp_path / "docker.sock", refuse=1) as proxy, Store.open(settings.store_url) as store:
        flaky = settings.model_copy(update={"docker_host": proxy.url})
        plan = BatchPlan(tasks_dir=str(EXAMPLES), model_urls=(url,), options=PoolOptions(workers=1, infra_retries=2))
        batch_id = start_batch(store, subset(chosen), plan)
        results = run_batch(store, flaky, batch_id)
        view = bstore.load_batch(store, batch_id)
        summaries = store.summaries([a.run_id for a in view.attempts if a.run_id])
        report = batch_report(view, {s.run.id: s for s in summaries})
    assert proxy.refused == 1
    assert [r.verdict for r in results] == ["PASS", "PASS"], [r.error for r in results]
    infra = [a for a in view.attempts if a.outcome == bstore.INFRASTRUCTURE]
    assert len(infra) == 1 and infra[0].verdict == INFRASTRUCTURE_FAILURE and "Docker daemon" in infra[0].error
    assert infra[0].run_id is None  # it failed before any run was recorded: nothing counts against the model
    assert report.infra_failures == 1 and report.passed == report.done == 2
    assert report.verdicts == {"PASS": 2}


def test_retries_are_bounded_and_the_task_stays_pending(tmp_path, settings):
    with FlakyDockerProxy(tmp_path / "docker.sock", refuse=1000) as proxy, Store.open(settings.store_url) as store:
        away = settings.model_copy(update={"docker_host": proxy.url})
        plan = BatchPlan(tasks_dir=str(EXAMPLES), model_urls=("http://127.0.0.1:9/v1",),
                         options=PoolOptions(workers=1, infra_retries=2))
        batch_id = start_batch(store, subset(("leap-400",)), plan)
        (result,) = run_batch(store, away, batch_id)
        view = bstore.load_batch(store, batch_id)
    assert result.outcome == bstore.INFRASTRUCTURE and proxy.refused >= 3
    assert [a.number for a in view.attempts] == [1, 2, 3] and view.pending() == ["leap-400"]
