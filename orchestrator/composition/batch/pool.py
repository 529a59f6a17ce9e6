"""The local executor: ``--workers N`` threads, each task one run in its own
sandbox. Sandbox starts are admitted a few at a time (``start_slots``), so many
workers do not storm dockerd; an infrastructure failure is retried up to
``infra_retries`` times and never becomes a model verdict."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from functools import partial
from pathlib import Path

from orchestrator.composition.batch.call_slots import CallSlots
from orchestrator.composition.batch.errors import BatchInterrupted
from orchestrator.composition.batch.placement import NoReplica, ReplicaPool
from orchestrator.composition.batch.runner import INFRASTRUCTURE_FAILURE, AttemptResult, Deadlines, run_attempt
from orchestrator.composition.batch.stopping import BatchStop
from orchestrator.composition.batch.tasks import BatchTask
from orchestrator.contract import Frozen
from orchestrator.settings import Settings
from store import Store
from store.write import batches as bstore


class PoolOptions(Frozen):
    workers: int = 4
    start_slots: int = 2
    replica_slots: int | None = None  # model calls in flight per replica; None: what the engine says
    infra_retries: int = 2
    deadlines: Deadlines = Deadlines()


# A run whose model server stopped answering: with another replica live, the
# replica is drained and the task moves (a cold prefix cache, so it is recorded).
REPLICA_LOST = "TRANSPORT_FAILURE"


def moved_off(store: Store, replicas: ReplicaPool, url: str, result: AttemptResult) -> AttemptResult:
    replicas.drain(url)
    error = f"replica {url} went away (run ended {result.verdict}); drained, task moved to another replica"
    bstore.finish_attempt(store, result.attempt_id, outcome=bstore.INFRASTRUCTURE, run_id=result.run_id,
                          verdict=INFRASTRUCTURE_FAILURE, error=error, was=bstore.MODEL)
    return result.model_copy(update={"outcome": bstore.INFRASTRUCTURE, "verdict": INFRASTRUCTURE_FAILURE,
                                     "error": error})


class StartSlot:
    """One held sandbox-start slot, given back exactly once."""

    def __init__(self, starts: threading.Semaphore) -> None:
        self.starts, self.held, self.lock = starts, True, threading.Lock()

    def release(self) -> None:
        with self.lock:
            if self.held:
                self.held = False
                self.starts.release()


def run_task_with_retries(
    store: Store, settings: Settings, batch_id: str, task: BatchTask, *, tasks_dir: Path, replicas: ReplicaPool,
    options: PoolOptions, starts: threading.Semaphore, on_attempt: Callable[[AttemptResult], None],
    calls: CallSlots | None = None, stop: BatchStop | None = None,
) -> AttemptResult | None:
    """The task's last attempt; None when the batch stopped before it had one."""
    calls, stop = calls or CallSlots(options.replica_slots), stop or BatchStop()
    result: AttemptResult | None = None
    for _ in range(1 + options.infra_retries):
        starts.acquire()
        if stop.stopped:
            starts.release()
            break
        try:
            url = replicas.acquire()
        except NoReplica:
            starts.release()
            raise
        slot = StartSlot(starts)
        try:
            result = run_attempt(store, settings, batch_id, task, tasks_dir=tasks_dir, model_url=url,
                                 deadlines=options.deadlines, admitted=slot.release, replica=url,
                                 around_model=partial(calls.around, url), stop=stop)
        finally:
            replicas.release(url)
            slot.release()  # also when the attempt failed before its run (the store away): no slot is lost
        if result.verdict == REPLICA_LOST and replicas.live() > 1:
            result = moved_off(store, replicas, url, result)
        on_attempt(result)
        if result.outcome != bstore.INFRASTRUCTURE:
            break
    return result


def run_pool(
    store: Store, settings: Settings, batch_id: str, tasks: list[BatchTask], *, tasks_dir: Path,
    model_urls: list[str], options: PoolOptions, on_attempt: Callable[[AttemptResult], None] = lambda r: None,
    on_stopping: Callable[[], None] = lambda: None,
) -> list[AttemptResult]:
    """Run ``tasks``, ``options.workers`` at once. Ctrl-C cancels the runs in
    flight and starts no more (``on_stopping`` is told), then raises
    ``BatchInterrupted`` once they have ended (each ends its call and removes
    its sandbox)."""
    replicas = ReplicaPool(model_urls)
    starts = threading.Semaphore(options.start_slots)
    calls, stop = CallSlots(options.replica_slots), BatchStop()
    with ThreadPoolExecutor(max_workers=options.workers, thread_name_prefix="batch") as pool:
        futures = [pool.submit(run_task_with_retries, store, settings, batch_id, task, tasks_dir=tasks_dir,
                               replicas=replicas, options=options, starts=starts, on_attempt=on_attempt,
                               calls=calls, stop=stop)
                   for task in tasks]
        try:
            results = [f.result() for f in futures]
        except KeyboardInterrupt:
            stop.stop()
            for future in futures:
                future.cancel()
            on_stopping()
            wait(futures)
            ended = sum(f.result() is not None for f in futures if not f.cancelled())
            raise BatchInterrupted(
                f"batch {batch_id} interrupted: {ended} of {len(tasks)} tasks ran, the runs in flight were "
                f"canceled; finish it with:\n  escrow batch --resume {batch_id[:12]}", batch_id=batch_id) from None
    return [r for r in results if r is not None]
