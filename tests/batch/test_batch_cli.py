"""``escrow batch`` as a real subprocess on the example tasks, the keyed fault
server playing each task's known fix: kill -9 of the driver mid-batch, the
runs it left read as crashed, and ``--resume`` finishes the batch with every
task counted once."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.composition.batch.tasks import load_task_file
from store import Store
from store.read import liveness
from store.write import batches as bstore
from tests.batch.conftest import EXAMPLES
from tests.processes import run_escrow, start_escrow

pytestmark = [pytest.mark.docker, pytest.mark.slow]



def escrow(home: Path, *args: str) -> subprocess.Popen:
    return start_escrow(home, *args)


def wait_for(predicate, what: str, timeout_s: float = 300.0, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert proc is None or proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def attempts(db: Path) -> list[bstore.AttemptView]:
    try:
        with Store.open(f"sqlite:///{db}", readonly=True, create=False) as store:
            found = [bstore.load_batch(store, b) for b in _batch_ids(store)]
    except Exception:  # the store is still being created by the batch
        return []
    return [a for view in found if view for a in view.attempts]


def _batch_ids(store: Store) -> list[str]:
    from sqlalchemy import select

    with store.read() as conn:
        return list(conn.execute(select(bstore.B.c.id)).scalars())


def test_kill_9_of_the_driver_then_resume_counts_every_task_once(tmp_path, fault_server, fix_scripts, sandbox_image):
    tasks = [t.id for t in load_task_file(EXAMPLES / "tasks.jsonl").tasks]
    for task_id in tasks:  # paced, so the kill lands while runs are in flight
        paced = [step.model_copy(update={"tokens_per_s": 40.0}) for step in fix_scripts[task_id]]
        fault_server.script_for(task_id, paced)
    home, db = tmp_path / "home", tmp_path / "home" / "escrow.db"
    common = ["--workers", "2", "--lease", "2", "--context-window", "8192", "--tokenizer", "cl100k_base",
              "--max-turns", "6", "--json"]
    url = f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1"
    driver = escrow(home, "batch", str(EXAMPLES / "tasks.jsonl"), "--model-url", url, *common)
    try:
        wait_for(lambda: sum(a.outcome == bstore.MODEL for a in attempts(db)) >= 2, "two finished tasks", proc=driver)
        wait_for(lambda: any(a.outcome == bstore.STARTED and a.run_id for a in attempts(db)), "a run in flight",
                 proc=driver)
        driver.send_signal(signal.SIGKILL)
        driver.communicate(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    before = attempts(db)
    in_flight = {a.run_id for a in before if a.outcome == bstore.STARTED and a.run_id}
    with Store.open(f"sqlite:///{db}", readonly=True, create=False) as store:
        (batch_id,) = _batch_ids(store)
        # The dead driver's runs read as crashed once their lease lapsed, in `escrow runs` too.
        wait_for(lambda: in_flight <= liveness.crashed_runs(store), "leases to lapse", timeout_s=60)
    listed = run_escrow(home, "runs", "--json", "--limit", "100")
    assert listed.returncode == 0, listed.stderr
    assert in_flight <= {r["id"] for r in json.loads(listed.stdout) if r["status"] == "crashed"}

    done_before = {a.task_id for a in before if a.outcome == bstore.MODEL}
    for task_id in set(tasks) - done_before:  # the killed runs consumed part of their scripts
        fault_server.script_for(task_id, fix_scripts[task_id])
    # Without the run flags: the resume applies the ones the batch started with.
    resumed = escrow(home, "batch", "--resume", batch_id[:8], "--workers", "2", "--json")
    out, err = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, err
    assert "Traceback" not in err
    report = json.loads(out)
    assert report["n_tasks"] == report["done"] == report["passed"] == len(tasks) == 13

    after = attempts(db)
    model = [a for a in after if a.outcome == bstore.MODEL]
    assert sorted(a.task_id for a in model) == sorted(tasks)  # each task counted exactly once
    assert {a.task_id for a in after if a.outcome == bstore.MODEL and a in before} == done_before  # not rerun
    with Store.open(f"sqlite:///{db}", readonly=True, create=False) as store:
        for attempt in model:
            assert store.run(attempt.run_id).verdict == "PASS" and store.verify(attempt.run_id).ok
    status = run_escrow(home, "batch", "status", batch_id, "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["passed"] == 13
    run_escrow(home, "sandbox", "gc")
