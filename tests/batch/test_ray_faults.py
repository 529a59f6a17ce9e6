"""The Ray executor under the rest of the faults, on a real two-node Ray
cluster started here (one for the module), real sandboxes and the keyed fault
server, the store a SQLite file on this host (both nodes run here):

- kill -9 of the batch driver mid-batch, then ``--resume`` (which runs on Ray
  again, as recorded with the batch): nothing lost or counted twice;
- dockerd unavailable for one sandbox start: an infrastructure failure, retried;
- a model replica that goes away: drained, the task moved, the move recorded;
- ``--start-slots`` held across both nodes, seen at a real proxy in front of
  dockerd, and a holder killed mid-start does not keep its slot;
- a worker that keeps running after its node was declared dead and its
  driver killed cannot overwrite its attempt once ``--resume`` settled it;
- fifty concurrent run writers in Ray workers on both nodes, one SQLite file.

Ray learns of a silent node quickly here (``RAY_HEAD_ENV``), for the lost worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from orchestrator.adapters.fault_server import FaultServer, Reply, ScriptedToolCall
from orchestrator.composition.batch.driver import BatchPlan, start_batch
from orchestrator.composition.batch.pool import PoolOptions
from orchestrator.composition.batch.ray_executor import run_ray
from orchestrator.composition.batch.ray_slots import NAMESPACE, PREFIX
from orchestrator.composition.batch.runner import INFRASTRUCTURE_FAILURE, Deadlines
from store import Store
from store.read import liveness
from store.write import batches as bstore
from tests.batch.conftest import EXAMPLES, batch_settings
from tests.batch.docker_proxy import FlakyDockerProxy, StallingDockerProxy
from tests.batch.ray_cluster import RayCluster, node_processes
from tests.batch.test_ray_batch import (
    CHOSEN,
    _batch_ids,
    escrow,
    fault_url,
    lease_owners,
    model_attempts,
    owner_pid,
    paced,
    subset,
    task_file,
    wait_for,
)
from tests.processes import ESCROW

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# A node whose raylet stops answering is declared dead after ~10 s, not ~60 s.
RAY_HEAD_ENV = {"RAY_health_check_initial_delay_ms": "2000", "RAY_health_check_period_ms": "2000",
                "RAY_health_check_timeout_ms": "2000", "RAY_health_check_failure_threshold": "5"}


def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def cli_on_ray(cluster: RayCluster, db: str) -> list[str]:
    return ["--executor", "ray", "--address", cluster.address, "--db", db, *common_flags()]


def common_flags() -> list[str]:
    return ["--workers", "4", "--lease", "2", "--infra-retries", "2", "--context-window", "8192",
            "--tokenizer", "cl100k_base", "--max-turns", "6", "--json"]


def run_states(store: Store, run_ids: set[str]) -> str:
    """Each run's status, lease and attempt, for a wait that timed out."""
    now = time.time()
    with store.read() as conn:
        runs = dict(conn.execute(select(liveness.R.c.id, liveness.R.c.status)
                                 .where(liveness.R.c.id.in_(run_ids))).all())
        leases = {r: (o, e) for r, o, e in conn.execute(select(liveness.RL.c.run_id, liveness.RL.c.owner,
                                                               liveness.RL.c.expires_at)
                                                        .where(liveness.RL.c.run_id.in_(run_ids)))}
    (batch_id,) = _batch_ids(store)
    attempts = {a.run_id: (a.outcome, a.error) for a in bstore.load_batch(store, batch_id).attempts}
    return "; ".join(
        f"{r[:12]} status={runs.get(r)} lease={leases[r][0] if r in leases else None} "
        f"expires_in={leases[r][1] - now if r in leases else None} "
        f"owner_alive={r in leases and Path(f'/proc/{owner_pid(leases[r][0])}').exists()} attempt={attempts.get(r)}"
        for r in sorted(run_ids))


def watch(into: set[tuple[str, str]], pids: set[int], cluster: RayCluster, store: Store,
          done: threading.Event) -> None:
    """Who holds each run's lease while the batch runs, and the cluster's processes meanwhile."""
    while not done.wait(0.2):
        pids.update(node_processes(cluster.root))
        into.update(lease_owners(store).items())


# Still streaming its first reply (at 2 tokens/s) when the driver is killed;
# the others, at 20 tokens/s, may be ending their runs at that moment.
SLOW = "roman-four"


def live_lease_owners(store: Store, cluster: RayCluster) -> set[str]:
    alive = node_processes(cluster.root)
    return {o for o in lease_owners(store).values() if owner_pid(o) in alive}


def test_kill_9_of_the_driver_then_resume_runs_on_ray_and_counts_every_task_once(tmp_path, ray_cluster,
                                                                                 fault_server, fix_scripts):
    for task_id in CHOSEN:
        fault_server.script_for(task_id, paced(fix_scripts[task_id], 2.0 if task_id == SLOW else 20.0))
    db, home = sqlite_url(tmp_path), tmp_path / "home"
    Store.open(db).close()
    driver = escrow(home, "batch", str(task_file(tmp_path)), "--model-url", fault_url(fault_server),
                    *cli_on_ray(ray_cluster, db))

    def slow_run_in_flight(store: Store) -> bool:
        owners = lease_owners(store)
        return any(a.task_id == SLOW and a.outcome == bstore.STARTED and a.run_id in owners
                   and owner_pid(owners[a.run_id]) in node_processes(ray_cluster.root)
                   for b in _batch_ids(store) for a in bstore.load_batch(store, b).attempts)

    try:
        with Store.open(db) as store:
            wait_for(lambda: any(a.outcome == bstore.MODEL for b in _batch_ids(store)
                                 for a in bstore.load_batch(store, b).attempts), "a finished task", proc=driver)
            wait_for(lambda: slow_run_in_flight(store), f"{SLOW}'s run in flight on Ray", proc=driver)
            driver.send_signal(signal.SIGKILL)
            driver.communicate(timeout=30)
            (batch_id,) = _batch_ids(store)
            # Ray ends the dead driver's workers; a run can end in the moment before.
            wait_for(lambda: not live_lease_owners(store, ray_cluster),
                     lambda: f"Ray to end the dead driver's workers: {live_lease_owners(store, ray_cluster)}",
                     timeout_s=120)
            before = bstore.load_batch(store, batch_id).attempts
            started = {a.run_id for a in before if a.outcome == bstore.STARTED and a.run_id}
            with store.read() as conn:
                running = set(conn.execute(select(liveness.R.c.id).where(liveness.R.c.status == "running")).scalars())
            in_flight = started & running
            assert any(a.task_id == SLOW and a.run_id in in_flight for a in before), run_states(store, started)
            # Their runs read as crashed once the lease lapsed.
            wait_for(lambda: in_flight <= liveness.crashed_runs(store),
                     lambda: f"leases to lapse: {run_states(store, in_flight)}", timeout_s=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    listed = subprocess.run([str(ESCROW), "runs", "--json", "--limit", "100", "--db", db], capture_output=True,
                            text=True, check=True)
    assert in_flight <= {r["id"] for r in json.loads(listed.stdout) if r["status"] == "crashed"}

    done_before = {a.task_id for a in before if a.outcome == bstore.MODEL}
    for task_id in set(CHOSEN) - done_before:  # the killed runs consumed part of their scripts
        fault_server.script_for(task_id, paced(fix_scripts[task_id], 40.0))
    # No --executor/--address: the batch runs where it was recorded to run.
    resumed = escrow(home, "batch", "--resume", batch_id[:12], "--db", db, *common_flags())
    owners: set[tuple[str, str]] = set()
    cluster: set[int] = set()
    done = threading.Event()
    with Store.open(db) as store:
        watcher = threading.Thread(target=watch, args=(owners, cluster, ray_cluster, store, done))
        watcher.start()
        try:
            out, err = resumed.communicate(timeout=900)
        finally:
            done.set()
            watcher.join()
    assert resumed.returncode == 0, err
    assert "Traceback" not in err and f"on Ray at {ray_cluster.address}" in err
    report = json.loads(out)
    assert report["n_tasks"] == report["done"] == report["passed"] == len(CHOSEN)
    ran_in = {owner_pid(o) for run_id, o in owners if run_id not in started}  # the dead runs' leases linger
    assert ran_in and ran_in <= cluster and resumed.pid not in ran_in, "the resume did not run on Ray"
    with Store.open(db) as store:
        view = bstore.load_batch(store, batch_id)
        model = [a for a in view.attempts if a.outcome == bstore.MODEL]
        assert sorted(a.task_id for a in model) == sorted(CHOSEN)  # each task counted exactly once
        assert {a.task_id for a in model if a in before} == done_before  # not rerun
        # A run still running at the kill is abandoned; one whose recording
        # had ended, its attempt not yet settled, keeps its own verdict.
        abandoned = [a for a in view.attempts if a.run_id in in_flight]
        assert all(a.outcome == bstore.INFRASTRUCTURE and "driver ended" in a.error for a in abandoned), [
            (a.task_id, a.run_id, a.outcome, a.error) for a in abandoned]
        for attempt in model:
            assert store.run(attempt.run_id).verdict == "PASS" and store.verify(attempt.run_id).ok
    subprocess.run([str(ESCROW), "sandbox", "gc"], capture_output=True)


def ray_batch(store: Store, ids, url: str, options: PoolOptions) -> tuple[str, list]:
    tasks = subset(ids)
    batch_id = start_batch(store, tasks, BatchPlan(tasks_dir=str(EXAMPLES), model_urls=(url,), options=options,
                                                   executor="ray"))
    return batch_id, list(tasks.tasks)


def test_replica_call_slots_hold_across_both_nodes(tmp_path, ray_cluster, fault_server, fix_scripts, sandbox_image):
    """``--replica-slots 1``, four runs in worker processes on two nodes: the
    server never has two calls at once (a gate per process would let four in)."""
    for task_id in CHOSEN:
        fault_server.script_for(task_id, paced(fix_scripts[task_id], 20.0))
    settings = batch_settings(tmp_path / "home", sandbox_image).model_copy(update={"db_url": sqlite_url(tmp_path)})
    options = PoolOptions(workers=4, replica_slots=1, deadlines=Deadlines(lease_s=5))
    owners: set[tuple[str, str]] = set()
    pids: set[int] = set()
    done = threading.Event()
    with Store.open(settings.store_url) as store:
        batch_id, tasks = ray_batch(store, CHOSEN, fault_url(fault_server), options)
        watcher = threading.Thread(target=watch, args=(owners, pids, ray_cluster, store, done))
        watcher.start()
        try:
            results = run_ray(store, settings, batch_id, tasks, tasks_dir=EXAMPLES,
                              model_urls=[fault_url(fault_server)], options=options, address=ray_cluster.address)
        finally:
            done.set()
            watcher.join()
    assert sorted(r.verdict for r in results) == ["PASS"] * len(CHOSEN), [r.error for r in results]
    processes = {owner_pid(o) for _, o in owners}
    assert len(processes) >= 2 and processes <= pids  # runs in several Ray worker processes shared the gate
    arrived = sorted(r.received_at for r in fault_server.requests if r.path.endswith("/chat/completions"))
    finished = sorted(stream.sent_at[-1] for stream in fault_server.streams)
    assert len(arrived) == len(finished) >= len(CHOSEN)
    for at in arrived:  # no call reached the server while another's stream was still being sent
        assert sum(a < at for a in arrived) - sum(f < at for f in finished) == 0, (at, arrived, finished)


def test_dockerd_away_for_one_sandbox_start_on_ray_is_retried_and_never_a_model_verdict(
        tmp_path, ray_cluster, fault_server, fix_scripts, sandbox_image):
    chosen = ("leap-400", "dedupe-order")
    for task_id in chosen:
        fault_server.script_for(task_id, fix_scripts[task_id])
    settings = batch_settings(tmp_path / "home", sandbox_image).model_copy(update={"db_url": sqlite_url(tmp_path)})
    options = PoolOptions(workers=2, infra_retries=2, deadlines=Deadlines(lease_s=5))
    with FlakyDockerProxy(tmp_path / "docker.sock", refuse=1) as proxy, Store.open(settings.store_url) as store:
        flaky = settings.model_copy(update={"docker_host": proxy.url})
        batch_id, tasks = ray_batch(store, chosen, fault_url(fault_server), options)
        results = run_ray(store, flaky, batch_id, tasks, tasks_dir=EXAMPLES, model_urls=[fault_url(fault_server)],
                          options=options, address=ray_cluster.address)
        view = bstore.load_batch(store, batch_id)
        assert sorted(a.task_id for a in model_attempts(store, batch_id)) == sorted(chosen)
    assert proxy.refused == 1
    assert sorted(r.verdict for r in results) == ["PASS", "PASS"], [r.error for r in results]
    infra = [a for a in view.attempts if a.outcome == bstore.INFRASTRUCTURE]
    assert len(infra) == 1 and infra[0].verdict == INFRASTRUCTURE_FAILURE and "Docker daemon" in infra[0].error
    assert infra[0].run_id is None  # failed before any run was recorded: nothing counts against the model


def test_a_replica_that_goes_away_on_ray_is_drained_and_its_task_moves(tmp_path, ray_cluster, fix_scripts,
                                                                        sandbox_image):
    chosen = ("clamp-bounds", "median-even")
    settings = batch_settings(tmp_path / "home", sandbox_image).model_copy(
        update={"db_url": sqlite_url(tmp_path), "deadline_s": 10.0})
    options = PoolOptions(workers=2, infra_retries=1, deadlines=Deadlines(lease_s=5))
    with FaultServer() as gone, FaultServer() as live:
        for task_id in chosen:
            live.script_for(task_id, fix_scripts[task_id])
        gone_url, live_url = fault_url(gone), fault_url(live)
        gone.stop()  # nothing listens there any more
        with Store.open(settings.store_url) as store:
            batch_id, tasks = ray_batch(store, chosen, gone_url, options)
            results = run_ray(store, settings, batch_id, tasks, tasks_dir=EXAMPLES, model_urls=[gone_url, live_url],
                              options=options, address=ray_cluster.address)
            view = bstore.load_batch(store, batch_id)
            first = [a for a in view.attempts if a.replica == gone_url]
            assert len(first) == 1 and first[0].outcome == bstore.INFRASTRUCTURE
            assert "went away" in first[0].error and store.run(first[0].run_id).verdict == "TRANSPORT_FAILURE"
    assert sorted(r.verdict for r in results) == ["PASS", "PASS"]
    moved = [a for a in view.attempts if a.task_id == first[0].task_id]
    assert [(a.replica, a.outcome) for a in moved] == [(gone_url, "infrastructure"), (live_url, "model")]
    assert all(a.replica == live_url for a in view.attempts if a.outcome == bstore.MODEL)


class InBackground(threading.Thread):
    """``run_ray`` in a thread, so the test can act while the batch runs."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(daemon=True)
        self.args, self.kwargs = args, kwargs
        self.results: list | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.results = run_ray(*self.args, **self.kwargs)
        except BaseException as exc:  # shown by the test
            self.error = exc

    def outcome(self, timeout_s: float = 900.0) -> list:
        self.join(timeout_s)
        assert not self.is_alive(), "the batch did not end"
        assert self.error is None, repr(self.error)
        return self.results or []


def slot_states(ray) -> list[dict]:
    """Every start-slot actor's state (this process is the batch's driver)."""
    return [ray.get(ray.get_actor(a["name"], namespace=NAMESPACE).state.remote())
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == NAMESPACE and a["name"].startswith(PREFIX)]


def test_start_slots_hold_across_both_nodes_and_a_killed_holder_frees_its_slot(tmp_path, ray_cluster, fault_server,
                                                                               fix_scripts, sandbox_image):
    import ray

    for task_id in CHOSEN:
        fault_server.script_for(task_id, fix_scripts[task_id])
    settings = batch_settings(tmp_path / "home", sandbox_image).model_copy(update={"db_url": sqlite_url(tmp_path)})
    # Four tasks of one CPU each fill the cluster's 2 + 2 CPUs: two on each node.
    options = PoolOptions(workers=4, start_slots=1, infra_retries=2, deadlines=Deadlines(lease_s=5))
    with StallingDockerProxy(tmp_path / "docker.sock", stall=1, safety_s=600, drop=True) as proxy, \
            Store.open(settings.store_url) as store:
        held = settings.model_copy(update={"docker_host": proxy.url})
        batch_id, tasks = ray_batch(store, CHOSEN, fault_url(fault_server), options)
        batch = InBackground(store, held, batch_id, tasks, tasks_dir=EXAMPLES, model_urls=[fault_url(fault_server)],
                             options=options, address=ray_cluster.address)
        batch.start()
        try:
            wait_for(lambda: proxy.creates >= 1 and ray.is_initialized(), "the first sandbox start")
            # Causality, not time: either a second start reaches dockerd while the first is
            # held (the limit does not hold), or the other three queue for the slot.
            (state,) = wait_for(lambda: proxy.creates >= 2 and [{}] or [s for s in slot_states(ray)
                                                                         if s["waiting"] == 3], "3 queued starts")
            assert proxy.creates == 1 and state["holders"] and len(state["holders"]) == 1
            (holder,) = wait_for(lambda: {owner_pid(o) for o in lease_owners(store).values()}, "the holder's run")
            attempts = bstore.load_batch(store, batch_id).attempts
            (killed,) = [a.task_id for a in attempts if a.outcome == bstore.STARTED]
            os.kill(holder, signal.SIGKILL)  # it dies holding the slot, its start still held at the proxy
            results = batch.outcome()
        finally:
            proxy.release.set()
        view = bstore.load_batch(store, batch_id)
    assert sorted(r.verdict for r in results) == ["PASS"] * len(CHOSEN), [r.error for r in results]
    lost = [a for a in view.attempts if a.outcome == bstore.INFRASTRUCTURE]
    assert [a.task_id for a in lost] == [killed] and "Ray task lost" in lost[0].error
    assert proxy.stalled == 1  # only the killed holder's start was held; every later one went through
    subprocess.run([str(ESCROW), "sandbox", "gc"], capture_output=True)


def test_a_lost_worker_that_keeps_running_cannot_overwrite_its_attempt(tmp_path, ray_cluster, sandbox_image):
    """The worker node goes silent (its raylet stopped) and the driver is killed:
    Ray cannot end that node's task worker, which runs on. Ray declares the
    node dead, ``--resume`` settles the attempt and reruns the task on the live
    node; when the lost worker's run ends, its verdict is fenced off."""
    # The model gives up (submits no change) turn after turn, slowly; the same
    # keyed script serves the lost worker and the rerun, whichever asks.
    give_up = Reply(tool_calls=(ScriptedToolCall(name="submit", arguments='{"summary": "no change"}'),), delay_s=8.0)
    db, home = sqlite_url(tmp_path), tmp_path / "home"
    Store.open(db).close()
    with FaultServer() as model:
        for task_id in CHOSEN:
            model.script_for(task_id, [give_up] * 60)
        driver = escrow(home, "batch", str(task_file(tmp_path)), "--model-url", fault_url(model),
                        *cli_on_ray(ray_cluster, db))
        raylet = ray_cluster.worker_raylet()
        try:
            with Store.open(db) as store:
                owners = wait_for(lambda: {r: o for r, o in lease_owners(store).items()
                                           if owner_pid(o) in ray_cluster.worker_pids()}, "a run on the worker node",
                                  proc=driver)
                (lost_run, owner), *_ = owners.items()
                os.kill(raylet, signal.SIGSTOP)  # the node goes silent; its task workers run on
                driver.send_signal(signal.SIGKILL)
                driver.communicate(timeout=30)
                ray_cluster.wait_for_nodes(1)  # Ray declared the worker node dead
                (batch_id,) = _batch_ids(store)
                assert store.run(lost_run).status == "running"
                os.kill(owner_pid(owner), 0)  # the lost worker is alive
                resumed = escrow(home, "batch", "--resume", batch_id[:12], "--db", db, *common_flags())
                out, err = resumed.communicate(timeout=900)
                assert resumed.returncode == 0, err
                (settled,) = [a for a in bstore.load_batch(store, batch_id).attempts if a.run_id == lost_run]
                wait_for(lambda: store.run(lost_run).status != "running", "the lost worker's run to end")
                view = bstore.load_batch(store, batch_id)
                (after,) = [a for a in view.attempts if a.run_id == lost_run]
                # It finished its run and tried to record its verdict: fenced off.
                assert store.run(lost_run).verdict not in (None, "INFRA_ERROR")
                assert after == settled and after.outcome == bstore.INFRASTRUCTURE and "driver ended" in after.error
                assert sorted(a.task_id for a in view.attempts if a.outcome == bstore.MODEL) == sorted(CHOSEN)
        finally:
            if driver.poll() is None:
                driver.kill()
            ray_cluster.kill_worker_node()  # the stopped raylet and the lost worker with it
    assert json.loads(out)["done"] == len(CHOSEN)
    subprocess.run([str(ESCROW), "sandbox", "gc"], capture_output=True)


class Gate:
    """An async Ray actor: each caller waits until ``count`` have arrived."""

    def __init__(self, count: int) -> None:
        import asyncio

        self.count, self.open = count, asyncio.Event()

    async def arrive(self) -> None:
        self.count -= 1
        if self.count <= 0:
            self.open.set()
        await self.open.wait()


def test_fifty_concurrent_runs_from_ray_workers_on_both_nodes_on_one_sqlite_file(tmp_path, ray_cluster):
    """Fifty Ray tasks at once, spread over both nodes, each writing what a batch
    worker writes for one run (test_sqlite_fifty's load, not fifty sandboxes:
    two cores cannot hold those), released together at a gate."""
    import ray

    from tests.batch import test_sqlite_fifty as fifty

    url, root = sqlite_url(tmp_path), str(Path(__file__).resolve().parents[2])
    batch_id = fifty.fifty_batch(url)
    ray.init(address=ray_cluster.address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR")
    try:
        gate = ray.remote(Gate).options(num_cpus=0).remote(fifty.RUNS)

        def one(index: int) -> tuple[str, list[str]]:
            import sys

            import ray

            sys.path.insert(0, root)  # Ray workers find the tests' code here
            from tests.batch.test_sqlite_fifty import record_one_run

            ray.get(gate.arrive.remote())
            return ray.get_runtime_context().get_node_id(), record_one_run(url, batch_id, index, 30_000, 8)

        task = ray.remote(one).options(num_cpus=0, scheduling_strategy="SPREAD")
        done = ray.get([task.remote(i) for i in range(fifty.RUNS)], timeout=1200)
        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    finally:
        ray.shutdown()
    errors = [e for _, errs in done for e in errs]
    assert errors == [], errors[0]
    assert {node for node, _ in done} == nodes and len(nodes) == 2
    fifty.every_chain_verifies(url, batch_id)


def test_ctrl_c_on_ray_interrupts_the_runs_in_flight_and_resume_reruns_only_them(tmp_path, ray_cluster,
                                                                                  fault_server, fix_scripts):
    """SIGINT at its default disposition, as a terminal delivers it, to a
    driver whose runs are in Ray workers: exit 130 with a clean message;
    each run in flight ends (never ``running``), its attempt reads
    ``interrupted``, not a model verdict or an infrastructure failure; and
    ``--resume`` reruns exactly the tasks without a model verdict."""
    for task_id in CHOSEN:
        fault_server.script_for(task_id, paced(fix_scripts[task_id], 2.0 if task_id == SLOW else 20.0))
    db, home = sqlite_url(tmp_path), tmp_path / "home"
    Store.open(db).close()
    driver = subprocess.Popen(
        [str(ESCROW), "batch", str(task_file(tmp_path)), "--model-url", fault_url(fault_server),
         *cli_on_ray(ray_cluster, db)], env={**os.environ, "ESCROW_HOME": str(home)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        with Store.open(db) as store:
            wait_for(lambda: any(a.task_id == SLOW and a.outcome == bstore.STARTED and a.run_id
                                 for b in _batch_ids(store) for a in bstore.load_batch(store, b).attempts),
                     f"{SLOW}'s run in flight on Ray", proc=driver)
        sent = time.time()
        driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=180)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err and "escrow batch --resume" in err
    assert out == ""
    with Store.open(db) as store:
        (batch_id,) = _batch_ids(store)
        after = bstore.load_batch(store, batch_id).attempts
        stopped = [a for a in after if a.outcome == bstore.INTERRUPTED]
        assert SLOW in {a.task_id for a in stopped}, after
        assert not [a for a in after if a.outcome in (bstore.STARTED, bstore.INFRASTRUCTURE)], after
        # Nothing ran after Ctrl-C. A Ray task handed out just before the
        # signal may still note its attempt, and even create its run, before
        # Ray's cancel reaches it (both seen in full runs; when Ray delivers the
        # cancel is not ours to order): such a run asked the model nothing and
        # ran no tool, and ended CANCELED before its first turn.
        for late in (a for a in after if a.started_at > sent and a.run_id):
            assert store.calls(late.run_id) == [] and store.tool_executions(late.run_id) == [], late
            assert store.run(late.run_id).verdict == "CANCELED", late
        assert all(a.verdict != "CANCELED" for a in after if a.outcome == bstore.MODEL), after
        for attempt in stopped:
            if attempt.run_id:
                assert store.run(attempt.run_id).status == "finished" and store.verify(attempt.run_id).ok

    done_before = {a.task_id for a in after if a.outcome == bstore.MODEL}
    for task_id in set(CHOSEN) - done_before:
        fault_server.script_for(task_id, paced(fix_scripts[task_id], 40.0))
    resumed = subprocess.run([str(ESCROW), "batch", "--resume", batch_id[:12], "--db", db, *common_flags()],
                             env={**os.environ, "ESCROW_HOME": str(home)}, capture_output=True, text=True,
                             timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["n_tasks"] == report["done"] == report["passed"] == len(CHOSEN) and report["interrupted"] == 0
    with Store.open(db) as store:
        final = bstore.load_batch(store, batch_id).attempts
    model = [a for a in final if a.outcome == bstore.MODEL]
    assert sorted(a.task_id for a in model) == sorted(CHOSEN)  # each task counted once
    assert {a.task_id for a in final if a not in after} == set(CHOSEN) - done_before


def test_a_worker_whose_cancel_never_came_stops_on_the_batchs_stop_and_sigterm_ends_it_at_once(tmp_path,
                                                                                               ray_cluster):
    """The two ways a batch's end reaches a Ray worker, at their mechanisms.
    Ctrl-C: the driver stops the batch on its slots actor, and a worker that
    Ray's cancel never reached (none is sent here) has its run's cancel set
    within one watch, and is handed no start slot after. A dead driver: Ray's
    SIGTERM ends the worker on the spot, so no clean-up of the run (here a
    ``finally`` that would write a file) races Ray's SIGKILL to record an end."""
    import ray

    from orchestrator.composition.batch.ray_executor import _stop_workers
    from orchestrator.composition.batch.ray_slots import new_token, start_slots_actor

    root, marks = str(Path(__file__).resolve().parents[2]), tmp_path / "marks"
    marks.mkdir()
    ray.init(address=ray_cluster.address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR")
    try:
        slots = start_slots_actor(ray, "stop-test", 2)

        def watched(slots: object, marks: str) -> bool:
            import sys
            import threading
            from pathlib import Path

            sys.path.insert(0, root)
            from orchestrator.composition.batch.ray_executor import CanceledByDriver

            cancel, stop = threading.Event(), CanceledByDriver(slots)
            with stop.watching(cancel):
                (Path(marks) / "watching").touch()
                return cancel.wait(120)

        def terminated(marks: str) -> None:
            import os
            import sys
            import time
            from pathlib import Path

            sys.path.insert(0, root)
            from orchestrator.composition.batch.ray_executor import ended_by_sigterm

            with ended_by_sigterm():
                try:
                    (Path(marks) / "pid").write_text(str(os.getpid()))
                    time.sleep(120)
                finally:
                    (Path(marks) / "cleaned up").touch()

        dying = ray.remote(terminated).options(num_cpus=0, max_retries=0).remote(str(marks))
        wait_for(lambda: (marks / "pid").exists(), "the task to start")
        os.kill(int((marks / "pid").read_text()), signal.SIGTERM)
        with pytest.raises(ray.exceptions.RayError):
            ray.get(dying, timeout=60)
        assert not (marks / "cleaned up").exists()

        ref = ray.remote(watched).options(num_cpus=0, max_retries=0).remote(slots, str(marks))
        wait_for(lambda: (marks / "watching").exists(), "the task to watch")
        assert ray.wait([ref], timeout=1.0)[0] == []  # nothing stops it yet
        _stop_workers(ray, slots)
        assert ray.get(ref, timeout=60) is True
        assert ray.get(slots.acquire.remote(new_token()), timeout=30) is False
    finally:
        ray.shutdown()
