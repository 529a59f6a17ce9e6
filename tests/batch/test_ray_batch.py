"""The Ray executor on a real two-node Ray cluster started here, the store on
a real PostgreSQL started here, real sandboxes, the keyed fault server
playing each task's script: the same verdicts as the local pool; kill -9 of
the worker node mid-batch loses and double-counts nothing; PostgreSQL stopped
mid-batch is a clean error, then ``--resume`` finishes the batch."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.adapters.fault_server import Reply, ScriptedToolCall
from orchestrator.composition.batch.driver import BatchPlan, start_batch
from orchestrator.composition.batch.pool import PoolOptions, run_pool
from orchestrator.composition.batch.ray_executor import run_ray
from orchestrator.composition.batch.runner import Deadlines
from orchestrator.composition.batch.tasks import load_task_file
from store import Store
from store.read import liveness
from store.write import batches as bstore
from tests.batch.conftest import EXAMPLES, batch_settings, subset_task_file
from tests.batch.pg_server import PostgresServer
from tests.batch.ray_cluster import RayCluster
from tests.processes import run_escrow, start_escrow

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CHOSEN = ("calc-mean", "roman-four", "kv-split-once", "leap-400")


def subset(ids=CHOSEN):
    task_file = load_task_file(EXAMPLES / "tasks.jsonl")
    return task_file.model_copy(update={"tasks": tuple(t for t in task_file.tasks if t.id in ids)})


def paced(steps, tokens_per_s: float = 40.0):
    return [s.model_copy(update={"tokens_per_s": tokens_per_s}) for s in steps]


def lease_owners(store: Store) -> dict[str, str]:
    with store.read() as conn:
        return {run_id: owner for run_id, owner in conn.execute(select(liveness.RL.c.run_id, liveness.RL.c.owner))}


def watch_owners(store: Store, label: str, into: set[tuple[str, str]], node: set[int], cluster: RayCluster,
                 done: threading.Event) -> None:
    """Who holds each run's lease while the batch runs (which process ran it),
    and the worker node's processes meanwhile (task workers end with the batch)."""
    while not done.wait(0.2):
        node.update(cluster.worker_pids())
        into.update((label, owner) for owner in lease_owners(store).values())


def owner_pid(owner: str) -> int:
    return int(owner.rsplit(":", 1)[1])


def wait_for(predicate, what: str | Callable[[], str], proc: subprocess.Popen | None = None,
             timeout_s: float = 300.0):
    """Poll ``predicate``; ``what`` (or what it returns, read on the timeout) names the wait."""
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        assert proc is None or proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"timed out waiting for {what if isinstance(what, str) else what()}"
        time.sleep(0.3)
    return value


def escrow(home: Path, *args: str) -> subprocess.Popen:
    return start_escrow(home, *args)


def model_attempts(store: Store, batch_id: str) -> list[bstore.AttemptView]:
    return [a for a in bstore.load_batch(store, batch_id).attempts if a.outcome == bstore.MODEL]


def test_ray_gives_the_local_pools_verdicts_and_runs_on_both_nodes(tmp_path, ray_cluster, postgres, fault_server,
                                                                   fix_scripts, sandbox_image):
    settings = batch_settings(tmp_path / "home", sandbox_image).model_copy(update={"db_url": postgres.url})
    # One task's model submits without a change until the turn limit: not a PASS, the model's own verdict.
    give_up = [Reply(tool_calls=(ScriptedToolCall(name="submit", arguments='{"summary": "no change"}'),))] * 6
    scripts = {t: fix_scripts[t] for t in CHOSEN[:3]} | {CHOSEN[3]: give_up}
    url = f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1"
    options = PoolOptions(workers=4, start_slots=2, infra_retries=1, deadlines=Deadlines(lease_s=5))
    tasks = list(subset().tasks)
    verdicts, owners, node = {}, set(), set()
    with Store.open(postgres.url) as store:
        for name, execute in (("local", run_pool), ("ray", run_ray)):
            for task_id, steps in scripts.items():
                fault_server.script_for(task_id, steps)
            batch_id = start_batch(store, subset(), BatchPlan(tasks_dir=str(EXAMPLES), model_urls=(url,),
                                                              options=options))
            extra = {"address": ray_cluster.address} if name == "ray" else {}
            done = threading.Event()
            watcher = threading.Thread(target=watch_owners, args=(store, name, owners, node, ray_cluster, done))
            watcher.start()
            try:
                results = execute(store, settings, batch_id, tasks, tasks_dir=EXAMPLES, model_urls=[url],
                                  options=options, **extra)
            finally:
                done.set()
                watcher.join()
            verdicts[name] = {r.task_id: r.verdict for r in results}
            assert sorted(a.task_id for a in model_attempts(store, batch_id)) == sorted(CHOSEN)
            for attempt in model_attempts(store, batch_id):
                assert store.verify(attempt.run_id).ok
    assert verdicts["ray"] == verdicts["local"]
    assert {t for t, v in verdicts["ray"].items() if v == "PASS"} == set(CHOSEN[:3])
    # The local pool ran in this process; Ray ran every task in its worker processes, on both nodes.
    local_pids = {owner_pid(o) for n, o in owners if n == "local"}
    ray_pids = {owner_pid(o) for n, o in owners if n == "ray"}
    assert local_pids == {os.getpid()}
    assert ray_pids and os.getpid() not in ray_pids
    assert ray_pids & node and ray_pids - node


def test_kill_9_of_the_worker_node_mid_batch_loses_and_double_counts_nothing(tmp_path, ray_cluster, postgres,
                                                                             fault_server, fix_scripts):
    for task_id in CHOSEN:
        fault_server.script_for(task_id, paced(fix_scripts[task_id]))
    with Store.open(postgres.url) as store:
        before = set(_batch_ids(store))
    driver = escrow(tmp_path / "home", "batch", str(task_file(tmp_path)), "--model-url", fault_url(fault_server),
                    *on_ray(ray_cluster, postgres))
    with Store.open(postgres.url) as store:
        try:
            wait_for(lambda: any(owner_pid(o) in ray_cluster.worker_pids() for o in lease_owners(store).values()),
                     "a run on the worker node", proc=driver)
            killed = ray_cluster.kill_worker_node()
            # Leases outlive their holders: read after the kill, they name every
            # run the node held, also one that began just before it.
            owners = lease_owners(store)
            on_node = {run_id for run_id, o in owners.items() if owner_pid(o) in killed}
            (batch_id,) = set(_batch_ids(store)) - before
            attempts = bstore.load_batch(store, batch_id).attempts
            # The driver may already have settled a cut attempt as lost.
            cut = {a.task_id for a in attempts if a.run_id in on_node and a.outcome != bstore.MODEL}
            assert cut, "the kill landed after the worker node's runs had ended"
            for task_id in cut:  # their runs consumed part of the script; the retries play it whole
                fault_server.script_for(task_id, paced(fix_scripts[task_id]))
            out, err = driver.communicate(timeout=900)
        finally:
            if driver.poll() is None:
                driver.kill()
        assert driver.returncode == 0, err
        assert "Traceback" not in err
        report = json.loads(out)
        assert report["n_tasks"] == report["done"] == report["passed"] == len(CHOSEN)
        view = bstore.load_batch(store, batch_id)
        model = [a for a in view.attempts if a.outcome == bstore.MODEL]
        assert sorted(a.task_id for a in model) == sorted(CHOSEN)  # each task counted exactly once
        lost = [a for a in view.attempts if a.outcome == bstore.INFRASTRUCTURE]
        errors = [(a.task_id, a.error) for a in lost]
        assert {a.task_id for a in lost} >= cut and all("Ray task lost" in (a.error or "") for a in lost), errors
        assert all(a.verdict == "INFRA_ERROR" for a in lost)
        for attempt in model:
            assert store.run(attempt.run_id).verdict == "PASS" and store.verify(attempt.run_id).ok
        # The runs the dead node left read as crashed once their lease lapsed, in `escrow runs` too.
        wait_for(lambda: on_node <= liveness.crashed_runs(store), "leases to lapse", timeout_s=60)
    listed = run_escrow(None, "runs", "--json", "--limit", "100", "--db", postgres.url)
    assert listed.returncode == 0, listed.stderr
    assert on_node <= {r["id"] for r in json.loads(listed.stdout) if r["status"] == "crashed"}
    run_escrow(None, "sandbox", "gc")


def task_file(where: Path) -> Path:
    return subset_task_file(where, CHOSEN)


def fault_url(fault_server) -> str:
    return f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1"


def on_ray(cluster: RayCluster, postgres: PostgresServer) -> list[str]:
    return ["--executor", "ray", "--address", cluster.address, "--db", postgres.url, "--workers", "4",
            "--lease", "2", "--infra-retries", "2", "--context-window", "8192", "--tokenizer", "cl100k_base",
            "--max-turns", "6", "--json"]


def test_postgresql_stopped_mid_ray_batch_is_a_clean_error_then_resume_finishes(tmp_path, ray_cluster, postgres,
                                                                                 fault_server, fix_scripts):
    for task_id in CHOSEN:
        fault_server.script_for(task_id, paced(fix_scripts[task_id]))
    with Store.open(postgres.url) as store:
        before = set(_batch_ids(store))
    driver = escrow(tmp_path / "home", "batch", str(task_file(tmp_path)), "--model-url", fault_url(fault_server),
                    *on_ray(ray_cluster, postgres))
    try:
        with Store.open(postgres.url) as store:
            (batch_id,) = wait_for(lambda: set(_batch_ids(store)) - before, "the batch", proc=driver)
            # Leases of other batches' dead runs linger: wait for one of this batch's runs.
            wait_for(lambda: {a.run_id for a in bstore.load_batch(store, batch_id).attempts
                              if a.outcome == bstore.STARTED} & set(lease_owners(store)), "a run in flight",
                     proc=driver)
        postgres.stop()
        try:
            out, err = driver.communicate(timeout=600)
        finally:
            postgres.start()
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 3, err  # StoreLost: documented exit code
    assert "Traceback" not in err and out == ""
    assert f"error: the store went away during batch {batch_id}" in err
    assert f"escrow batch --resume {batch_id[:12]}" in err

    with Store.open(postgres.url) as store:
        view = bstore.load_batch(store, batch_id)
        done = {a.task_id for a in view.attempts if a.outcome == bstore.MODEL}
        assert set(view.pending()) == set(CHOSEN) - done and view.pending()
    for task_id in set(CHOSEN) - done:  # their runs were cut short; the resumed ones play the script whole
        fault_server.script_for(task_id, paced(fix_scripts[task_id]))
    resumed = escrow(tmp_path / "home", "batch", "--resume", batch_id[:12], *on_ray(ray_cluster, postgres))
    out, err = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, err
    report = json.loads(out)
    assert report["n_tasks"] == report["done"] == report["passed"] == len(CHOSEN)
    with Store.open(postgres.url) as store:
        view = bstore.load_batch(store, batch_id)
        model = [a for a in view.attempts if a.outcome == bstore.MODEL]
        assert sorted(a.task_id for a in model) == sorted(CHOSEN)  # nothing counted twice
        for attempt in model:
            assert store.run(attempt.run_id).verdict == "PASS" and store.verify(attempt.run_id).ok
    run_escrow(None, "sandbox", "gc")


def _batch_ids(store: Store) -> list[str]:
    with store.read() as conn:
        return list(conn.execute(select(bstore.B.c.id)).scalars())
