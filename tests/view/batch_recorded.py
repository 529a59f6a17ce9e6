"""A batch recorded through the store's batch API, each attempt's run
recorded through the Recorder: task ids and errors carry hostile text."""

from __future__ import annotations

from store import Recorder, Store
from store.write import batches as bstore
from store.write import synthetic
from tests.view.recorded import XSS

HOSTILE_TASK = f"task-{XSS}"
INFRA_ERROR = f"dockerd went away {XSS}"


def record_batch(store: Store) -> tuple[str, dict[str, list[str | None]]]:
    """Four tasks: one passes, one fails (BUDGET_EXHAUSTED) on its first
    try, the hostile one passes after an infrastructure failure, one never
    starts. Returns the batch id and each task's attempts' run ids."""
    tasks = {"passes": (1, {"id": "passes"}), "fails": (2, {"id": "fails"}), HOSTILE_TASK: (3, {"id": HOSTILE_TASK}),
             "waiting": (4, {"id": "waiting"})}
    batch_id = bstore.create_batch(store, task_file=f"tasks/{XSS}.jsonl", tasks=tasks, settings={"workers": 2})
    recorder = Recorder(store)
    runs: dict[str, list[str | None]] = {}

    def attempt(task_id: str, outcome: str, verdict: str | None, error: str | None = None) -> None:
        attempt_id = bstore.start_attempt(store, batch_id, task_id, replica="http://127.0.0.1:9/v1")
        run_id = None
        if outcome == bstore.MODEL:
            run_id = synthetic.record_run(recorder, turns=2, seed=len(runs) + 3, finish=False)
            recorder.finish_run(run_id, verdict or "PASS", "verifier", turn=2)
        bstore.finish_attempt(store, attempt_id, outcome=outcome, run_id=run_id, verdict=verdict, error=error)
        runs.setdefault(task_id, []).append(run_id)

    attempt("passes", bstore.MODEL, "PASS")
    attempt("fails", bstore.MODEL, "BUDGET_EXHAUSTED", "over budget")
    attempt(HOSTILE_TASK, bstore.INFRASTRUCTURE, "INFRA_ERROR", INFRA_ERROR)
    attempt(HOSTILE_TASK, bstore.MODEL, "PASS")
    return batch_id, runs
