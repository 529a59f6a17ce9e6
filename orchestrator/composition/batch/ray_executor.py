"""The Ray executor: ``--executor ray --address ADDR``, one Ray task per
trajectory on a Ray cluster, the store on PostgreSQL so every node records
into it.

Each Ray task runs one attempt through the same per-task runner as the local
pool (``runner.run_attempt``, which starts the run only through the library
entry point). Ray's own retries are off: the driver here retries, so that each
attempt is recorded. A Ray task lost with its worker or its node becomes an
``infrastructure`` attempt (its run, left ``running``, reads as crashed once
its lease lapses) and is retried up to ``infra_retries``; an attempt that had
recorded a model verdict before its worker died stands and is not rerun.
The store going away ends the batch with ``StoreLost``: resume it later.
Sandbox starts and each replica's model calls are admitted cluster-wide
(``ray_slots``). A worker that Ray declared lost but that still runs cannot
overwrite what the driver settled: an attempt is finished only while it is
still ``started`` (fencing).

The store must be one every node reaches: PostgreSQL, or a SQLite file when
every node of the cluster runs on this host.

Ray is imported only when a batch runs on it (the ``ray`` extra).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from orchestrator.composition.batch.call_slots import CallSlots
from orchestrator.composition.batch.driver import pending_tasks
from orchestrator.composition.batch.errors import BatchInterrupted, RayUnavailable, StoreLost
from orchestrator.composition.batch.placement import ReplicaPool
from orchestrator.composition.batch.pool import REPLICA_LOST, PoolOptions, moved_off
from orchestrator.composition.batch.ray_slots import SharedGate, call_gates_actor, new_token, start_slots_actor
from orchestrator.composition.batch.runner import INFRASTRUCTURE_FAILURE, AttemptResult, Deadlines, run_attempt
from orchestrator.composition.batch.stopping import BatchStop
from orchestrator.composition.batch.tasks import BatchTask
from orchestrator.settings import Settings
from store import Store
from store.errors import StoreError
from store.write import batches as bstore

# How long in-flight Ray tasks get to end on their own once the batch stops.
DRAIN_S = 30.0


# How long one watch of the batch's stop waits before it asks again.
WATCH_S = 5.0


class CanceledByDriver(BatchStop):
    """Ctrl-C on the driver reaches a worker two ways: Ray's cancel of its
    task (a KeyboardInterrupt there, which ends the run CANCELED) and the
    batch's stop on the slots actor, which a thread here watches, for the
    task whose cancel Ray lost (one handed out as the signal came). Read
    through this, the attempt is then ``interrupted`` (rerun on
    ``--resume``), as in the local pool, and not a model verdict."""

    def __init__(self, slots: Any = None) -> None:
        super().__init__()
        self._over = threading.Event()
        if slots is not None:
            threading.Thread(target=self._watch, args=(slots,), name="escrow-batch-stop", daemon=True).start()

    @property
    def stopped(self) -> bool:
        import ray

        return super().stopped or ray.get_runtime_context().is_canceled()

    def _watch(self, slots: Any) -> None:
        import ray

        while not self._over.is_set():
            try:
                if ray.get(slots.wait_stopped.remote(WATCH_S)):
                    self.stop()
                    return
            except ray.exceptions.RayError:  # the actor ended with its driver, and Ray ends this worker
                return

    def close(self) -> None:
        self._over.set()


@contextlib.contextmanager
def ended_by_sigterm() -> Iterator[None]:
    """While an attempt runs, SIGTERM ends this worker at once. Ray ends a
    dead driver's workers with SIGTERM and, a moment later, SIGKILL; Python
    would make the SIGTERM a SystemExit, and the run would record an
    INFRA_ERROR in that moment, or not, as the race fell. Ended at once, it
    is always what it is: a run whose process died, read ``crashed`` once
    its lease lapses, as when the local pool's driver is killed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def attempt_on_worker(settings: Settings, batch_id: str, task: BatchTask, tasks_dir: str, model_url: str,
                      deadlines: Deadlines, slots: Any = None, token: str = "", call_gates: Any = None,
                      replica_slots: int | None = None) -> dict[str, Any]:
    """The body of one Ray task, in a worker process on any node. It takes a
    start slot from ``slots`` (the batch's actor) and gives it back once its
    sandbox is up; the driver gives it back too, should this process die. Its
    model calls take the replica's slots from ``call_gates``, shared by every worker."""
    def admitted() -> None:
        if slots is not None:
            slots.release.remote(token)

    if slots is not None:
        import ray

        if not ray.get(slots.acquire.remote(token)):
            raise RuntimeError("the batch stopped, or the driver ended this task, before it got a start slot")
    calls = CallSlots(replica_slots) if call_gates is None else CallSlots(
        replica_slots, make_gate=lambda replica, size: SharedGate(call_gates, replica, size, token))
    stop = CanceledByDriver(slots)
    try:
        with ended_by_sigterm(), Store.open(settings.store_url) as store:
            result = run_attempt(store, settings, batch_id, task, tasks_dir=Path(tasks_dir), model_url=model_url,
                                 deadlines=deadlines, admitted=admitted, replica=model_url,
                                 around_model=partial(calls.around, model_url), stop=stop)
    except StoreError as exc:  # plain text back: the driver ends the batch with StoreLost
        return {"store_lost": str(exc)}
    finally:
        stop.close()
        admitted()
    return result.model_dump(mode="json")


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable("--executor ray needs Ray: pip install 'escrow[ray]'") from exc
    return ray


def connect(address: str, *, probe_s: float = 10.0) -> Any:
    """Join the running cluster at ``address`` as its driver."""
    ray = _ray()
    host, _, port = address.rpartition(":")
    if host and port.isdigit():  # ray.init waits minutes on an address where nothing listens
        try:
            socket.create_connection((host, int(port)), timeout=probe_s).close()
        except OSError as exc:
            raise RayUnavailable(f"no Ray cluster answers at {address}: {exc}", address=address) from exc
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING, namespace="escrow")
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RayUnavailable(f"no Ray cluster answers at {address}: {exc}", address=address) from exc
    return ray


LOOPBACK = ("127.", "localhost", "::1", "[::1]")


def require_shared_store(store: Store, address: str) -> None:
    """Refuse, before anything is recorded, a store other nodes cannot reach:
    PostgreSQL always serves; a SQLite file only a cluster on this host
    (a loopback address here; ``require_one_host`` checks its nodes)."""
    if store.dialect == "postgresql" or (store.dialect == "sqlite" and address.startswith(LOOPBACK)):
        return
    raise RayUnavailable(
        f"--executor ray records from every node into one store, which must be PostgreSQL "
        f"(--db postgresql+psycopg://USER@HOST/DB), or a SQLite file with a cluster on this host "
        f"(--address 127.0.0.1:PORT); {store.url} is {store.dialect}", store=store.url)


def require_one_host(ray: Any, store: Store) -> None:
    """A SQLite store is one file on this host: every live node must run here."""
    if store.dialect != "sqlite":
        return
    here = socket.gethostname()
    away = sorted({n["NodeManagerHostname"] for n in ray.nodes() if n["Alive"]} - {here})
    if away:
        raise RayUnavailable(f"a SQLite store is a file on {here}, which Ray nodes on {', '.join(away)} cannot "
                             f"reach: use PostgreSQL", store=store.url)


class _Submitted:
    """A Ray task in flight: which task, on which replica, above which attempt
    number, under which start-slot token."""

    def __init__(self, task: BatchTask, url: str, after: int, token: str) -> None:
        self.task, self.url, self.after, self.token = task, url, after, token


def run_ray(
    store: Store, settings: Settings, batch_id: str, tasks: list[BatchTask], *, tasks_dir: Path,
    model_urls: list[str], options: PoolOptions, address: str,
    on_attempt: Callable[[AttemptResult], None] = lambda r: None, on_stopping: Callable[[], None] = lambda: None,
) -> list[AttemptResult]:
    """Run ``tasks`` on the Ray cluster at ``address``, at most ``options.workers`` at once.
    Ctrl-C cancels the Ray tasks in flight and raises ``BatchInterrupted``."""
    require_shared_store(store, address)
    # Ray prints cluster events (a node marked dead) on the driver's stdout,
    # which belongs to the caller (``--json``): they go to stderr instead.
    with contextlib.redirect_stdout(sys.stderr):
        ray = connect(address)
        try:
            require_one_host(ray, store)
            return _drive(ray, store, settings, batch_id, tasks, tasks_dir=tasks_dir, model_urls=model_urls,
                          options=options, on_attempt=on_attempt, on_stopping=on_stopping)
        finally:
            ray.shutdown()


def _drive(ray: Any, store: Store, settings: Settings, batch_id: str, tasks: list[BatchTask], *, tasks_dir: Path,
           model_urls: list[str], options: PoolOptions, on_attempt: Callable[[AttemptResult], None],
           on_stopping: Callable[[], None]) -> list[AttemptResult]:
    # SPREAD puts tasks on every node; a task retried after its node died lands on a live one.
    remote = ray.remote(attempt_on_worker).options(num_cpus=1, max_retries=0, scheduling_strategy="SPREAD")
    replicas = ReplicaPool(model_urls)
    slots, calls = start_slots_actor(ray, batch_id, options.start_slots), call_gates_actor(ray, batch_id)
    view = bstore.load_batch(store, batch_id)
    numbers = {t.id: sum(a.task_id == t.id for a in view.attempts) for t in tasks} if view else {}
    queue, tries = deque(tasks), {t.id: 0 for t in tasks}
    in_flight: dict[Any, _Submitted] = {}
    results: dict[str, AttemptResult] = {}
    try:
        while queue or in_flight:
            while queue and len(in_flight) < options.workers:
                task = queue.popleft()
                url, token = replicas.acquire(), new_token()
                ref = remote.remote(settings, batch_id, task, str(tasks_dir), url, options.deadlines, slots, token,
                                    calls, options.replica_slots)
                in_flight[ref] = _Submitted(task, url, numbers.get(task.id, 0), token)
            (ref,), _ = ray.wait(list(in_flight), num_returns=1)
            sent = in_flight.pop(ref)
            replicas.release(sent.url)
            slots.release.remote(sent.token)  # its worker may have died holding it
            calls.release_task.remote(sent.token)
            result = _collect(ray, store, batch_id, ref, sent)
            numbers[sent.task.id] = sent.after + 1
            if result.verdict == REPLICA_LOST and replicas.live() > 1:
                result = moved_off(store, replicas, sent.url, result)
            on_attempt(result)
            if result.outcome == bstore.INFRASTRUCTURE and tries[sent.task.id] < options.infra_retries:
                tries[sent.task.id] += 1
                queue.append(sent.task)
            else:
                results[sent.task.id] = result
    except KeyboardInterrupt:
        on_stopping()
        _stop_workers(ray, slots)
        _drain(ray, list(in_flight))  # each canceled task's run ends CANCELED
        bstore.abandon_started(store, batch_id, verdict=None, error="Ctrl-C stopped the batch",
                               outcome=bstore.INTERRUPTED)
        raise BatchInterrupted(f"batch {batch_id} interrupted: the runs in flight were canceled; finish it with:\n"
                               f"  escrow batch --resume {batch_id[:12]}", batch_id=batch_id) from None
    except (StoreError, StoreLost) as exc:
        _drain(ray, list(in_flight))
        raise StoreLost(f"the store went away during batch {batch_id} ({exc}); what was recorded stands; "
                        f"once the store is back, finish it with:\n  escrow batch --resume {batch_id[:12]}",
                        batch=batch_id) from exc
    return [results[t.id] for t in tasks if t.id in results]


def _collect(ray: Any, store: Store, batch_id: str, ref: Any, sent: _Submitted) -> AttemptResult:
    """The attempt's result, or, for a Ray task that was lost, what the store says of it."""
    try:
        payload = ray.get(ref)
    except ray.exceptions.RayError as exc:
        lost = f"Ray task lost ({type(exc).__name__}): {str(exc).splitlines()[0][:300]}"
        seen = bstore.settle_lost(store, batch_id, sent.task.id, after=sent.after, verdict=INFRASTRUCTURE_FAILURE,
                                  error=lost, replica=sent.url)
        return AttemptResult(task_id=sent.task.id, outcome=seen.outcome, verdict=seen.verdict, run_id=seen.run_id,
                             error=seen.error)
    if "store_lost" in payload:
        raise StoreLost(payload["store_lost"])
    return AttemptResult.model_validate(payload)


def _stop_workers(ray: Any, slots: Any) -> None:
    """Tell every worker of the batch to stop, before Ray's cancels go out."""
    with contextlib.suppress(ray.exceptions.RayError):
        ray.get(slots.stop.remote(), timeout=DRAIN_S)


def _drain(ray: Any, refs: list[Any]) -> None:
    """Stop the Ray tasks still in flight; each run's own clean-up removes its sandbox."""
    for ref in refs:
        ray.cancel(ref)
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=DRAIN_S)


def run_batch_on_ray(store: Store, settings: Settings, batch_id: str, *, address: str,
                     on_attempt: Callable[[AttemptResult], None] = lambda r: None,
                     options: PoolOptions | None = None,
                     on_stopping: Callable[[], None] = lambda: None) -> list[AttemptResult]:
    """Run every task of the batch that has no model verdict yet, on Ray."""
    plan, tasks = pending_tasks(store, batch_id)
    return run_ray(store, settings, batch_id, tasks, tasks_dir=Path(plan.tasks_dir),
                   model_urls=list(plan.model_urls), options=options or plan.options, address=address,
                   on_attempt=on_attempt, on_stopping=on_stopping)
