"""Fifty agent runs at once, each in its own sandbox, from Ray workers on both
nodes of a real two-node cluster, all recording into one SQLite file:
``escrow batch --executor ray --workers 50`` as a real subprocess. No
"database is locked" reaches anyone, every task is counted once, and every
chain verifies.

Each model reply stalls before its headers (under the call deadline) until a
watcher, counting the runs in flight from the store itself, has seen all
fifty at once; then the fault server lets every stall go and the runs end. Each node
offers 25 logical CPUs to Ray: a run mostly waits, on the model or on Docker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select

from store import Store
from store.read import liveness
from store.write import batches as bstore
from tests.batch.conftest import EXAMPLES
from tests.batch.test_batch_cli import _batch_ids, wait_for
from tests.processes import ESCROW

pytestmark = [pytest.mark.docker, pytest.mark.slow]

RAY_CPUS = (25, 25)
RUNS = 50
DEFAULT_POLICY = Path(__file__).resolve().parents[2] / "policies" / "default.toml"
# Before each reply's headers, under the call deadline the batch is given
# (CALL_DEADLINE_S). Each run stalls twice or more, so it outlasts the start of
# the last of fifty Ray workers: a full run saw those starts spread over 240 s
# on this 2-core machine, and with 80 s stalls the first runs ended at 180 s.
# Once all fifty were seen in flight, every stall, now and later, ends.
STALL_S = 150.0
ALL_IN_FLIGHT = "all fifty in flight"  # the stalls' release
CALL_DEADLINE_S = 240


def task_file(where, fix_scripts, fault_server) -> list[str]:
    """Fifty rows cycling through the example tasks under fresh ids, each id's
    micro-repository its example's, each id its own paced script."""
    rows = {r["instance_id"]: r for r in map(json.loads, (EXAMPLES / "tasks.jsonl").read_text().splitlines())}
    bases = sorted(rows)
    ids = [f"{bases[i % len(bases)]}-{i:02d}" for i in range(RUNS)]
    lines = []
    for task_id in ids:
        base = task_id.rsplit("-", 1)[0]
        lines.append(json.dumps({**rows[base], "instance_id": task_id}) + "\n")
        (where / task_id).symlink_to(EXAMPLES / base)
        fault_server.script_for(task_id, [s.model_copy(update={"delay_s": STALL_S, "released_by": ALL_IN_FLIGHT})
                                           for s in fix_scripts[base]])
    (where / "tasks.jsonl").write_text("".join(lines))
    return ids


def in_flight(url: str) -> int:
    """Runs of the batch started and not ended, as the store says now."""
    with Store.open(url, readonly=True, create=False) as store, store.read() as conn:
        started = (select(func.count()).select_from(bstore.BA.join(liveness.R, liveness.R.c.id == bstore.BA.c.run_id))
                   .where(bstore.BA.c.outcome == bstore.STARTED, liveness.R.c.status == "running"))
        return int(conn.execute(started).scalar_one())


def test_fifty_sandboxed_runs_at_once_from_ray_on_both_nodes_on_one_sqlite_file(tmp_path, ray_cluster, fault_server,
                                                                                 fix_scripts, sandbox_image):
    ids = task_file(tmp_path, fix_scripts, fault_server)
    db = tmp_path / "store.db"
    url = f"sqlite:///{db}"
    # Fifty verifiers start within seconds of each other on this small machine:
    # a roomier command deadline than the default policy's 60 s, or some are killed.
    policy = tmp_path / "policy.toml"
    policy.write_text(DEFAULT_POLICY.read_text().replace("command_timeout_s = 60\n", "command_timeout_s = 900\n"))
    assert "command_timeout_s = 900" in policy.read_text()
    env = {**os.environ, "ESCROW_HOME": str(tmp_path / "home"), "ESCROW_POLICY": str(policy),
           "ESCROW_DEADLINE_S": str(CALL_DEADLINE_S)}
    driver = subprocess.Popen(
        [str(ESCROW), "batch", str(tmp_path / "tasks.jsonl"), "--executor", "ray", "--address", ray_cluster.address,
         "--db", url, "--model-url", f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1",
         "--workers", str(RUNS), "--start-slots", "4", "--lease", "10", "--context-window", "8192",
         "--tokenizer", "cl100k_base", "--max-turns", "6", "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    most, owners, done = [0], set(), threading.Event()
    worker_node: set[int] = set()  # task workers end with the batch: seen while it runs

    def watch() -> None:
        while not done.wait(1.0):
            worker_node.update(ray_cluster.worker_pids())
            try:
                most[0] = max(most[0], in_flight(url))
                if most[0] == RUNS:
                    fault_server.release(ALL_IN_FLIGHT)
                with Store.open(url, readonly=True, create=False) as store, store.read() as conn:
                    owners.update(conn.execute(select(liveness.RL.c.owner)).scalars())
            except Exception:  # the store is still being created by the batch
                continue

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        wait_for(lambda: db.exists(), "the store", proc=driver)
        out, err = driver.communicate(timeout=1500)
    finally:
        done.set()
        watcher.join()
        if driver.poll() is None:
            driver.send_signal(signal.SIGKILL)
    assert driver.returncode == 0, err[-3000:]
    (tmp_path / "driver.err").write_text(err)
    assert "database is locked" not in err
    assert "Traceback" not in err, err[max(0, err.find("Traceback") - 2000):err.find("Traceback") + 3000]
    report = json.loads(out)
    assert report["n_tasks"] == report["done"] == report["passed"] == RUNS
    assert most[0] == RUNS  # all fifty were in flight at one moment
    with Store.open(url, readonly=True, create=False) as store:
        (batch_id,) = _batch_ids(store)
        view = bstore.load_batch(store, batch_id)
    assert view is not None
    assert sorted(a.task_id for a in view.attempts if a.outcome == bstore.MODEL) == sorted(ids)  # each once
    assert not [a for a in view.attempts if a.outcome != bstore.MODEL]  # no store error, no retry
    pids = {int(o.rsplit(":", 1)[1]) for o in owners}
    assert len(pids) >= RUNS  # fifty at once: each in its own worker process
    assert pids & worker_node and pids - worker_node  # on both nodes
    verified = subprocess.run([str(ESCROW), "verify", "--all", "--db", url], capture_output=True, text=True, env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    subprocess.run([str(ESCROW), "sandbox", "gc"], capture_output=True, env=env)
