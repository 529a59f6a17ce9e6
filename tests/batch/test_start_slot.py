"""A sandbox-start slot is given back once the sandbox is up, before the
run's first model call: a slot held through a model call would queue the
other workers' sandbox starts behind that call (with 8 workers and 2 slots,
each pair of runs behind the previous pair's first turn)."""

from __future__ import annotations

import pytest

from orchestrator.composition.batch.driver import BatchPlan, start_batch
from orchestrator.composition.batch.pool import PoolOptions
from orchestrator.composition.batch.runner import run_attempt
from orchestrator.composition.batch.tasks import load_task_file
from store import Store
from tests.batch.conftest import EXAMPLES

pytestmark = [pytest.mark.docker]


def chat_calls(fault_server) -> int:
    return sum(r.path.endswith("/chat/completions") for r in fault_server.requests)


@pytest.mark.parametrize("task_id", ["calc-mean", "roman-four"])
def test_the_start_slot_is_given_back_before_the_first_model_call(settings, fault_server, fix_scripts, task_id):
    task_file = load_task_file(EXAMPLES / "tasks.jsonl")
    task = next(t for t in task_file.tasks if t.id == task_id)
    fault_server.script_for(task_id, fix_scripts[task_id])
    url = f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1"
    calls_when_admitted: list[int] = []
    with Store.open(settings.store_url) as store:
        batch_id = start_batch(store, task_file.model_copy(update={"tasks": (task,)}),
                               BatchPlan(tasks_dir=str(EXAMPLES), model_urls=(url,), options=PoolOptions()))
        result = run_attempt(store, settings, batch_id, task, tasks_dir=EXAMPLES, model_url=url,
                             admitted=lambda: calls_when_admitted.append(chat_calls(fault_server)))
        assert store.run(result.run_id).status != "running"
    assert result.verdict == "PASS", result
    # Given back exactly once, and no chat call had reached the model yet.
    assert calls_when_admitted == [0]
    assert chat_calls(fault_server) == len(fix_scripts[task_id])

