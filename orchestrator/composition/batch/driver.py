"""A batch from start (or resume) to its last attempt: the task file parsed,
the batch and its tasks recorded, pending tasks handed to an executor."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from orchestrator.composition.batch.errors import BatchNotFound, StoreLost
from orchestrator.composition.batch.pool import PoolOptions, run_pool
from orchestrator.composition.batch.runner import AttemptResult
from orchestrator.composition.batch.tasks import BatchTask, TaskFile
from orchestrator.contract import Frozen
from orchestrator.settings import Settings
from store import Store
from store.errors import StoreError
from store.write import batches as bstore


class BatchPlan(Frozen):
    """What a batch was started with, kept in its row so ``--resume`` repeats it."""

    tasks_dir: str
    model_urls: tuple[str, ...]
    options: PoolOptions
    executor: str = "local"  # or "ray", at ``address``
    address: str | None = None
    run_settings: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """The run settings given as flags when the batch started (model, context
    window, turn and token limits...): a resume applies them again, under any
    flag it is given itself."""


def start_batch(store: Store, task_file: TaskFile, plan: BatchPlan) -> str:
    rows = {t.id: (t.line, t.model_dump(mode="json")) for t in task_file.tasks}
    return bstore.create_batch(store, task_file=task_file.path, tasks=rows, settings=plan.model_dump(mode="json"))


def find_batch(store: Store, ref: str) -> str:
    """The one batch whose id starts with ``ref``; an ambiguous prefix names
    what it matches, so the user can pick one."""
    found = bstore.matching_batches(store, ref, limit=6) if ref else []
    if not found:
        raise BatchNotFound(f"no batch matches {ref!r} in {store.url}", batch=ref)
    if len(found) > 1 and ref not in found:
        named = ", ".join(batch_id[:12] for batch_id in found[:5]) + (" and more" if len(found) > 5 else "")
        raise BatchNotFound(f"batch prefix {ref!r} is ambiguous: it matches {named}; give more characters",
                            batch=ref)
    return ref if ref in found else found[0]


def pending_tasks(store: Store, batch_id: str) -> tuple[BatchPlan, list[BatchTask]]:
    view = bstore.load_batch(store, batch_id)
    if view is None:
        raise BatchNotFound(f"no batch {batch_id!r} in {store.url}", batch_id=batch_id)
    plan = BatchPlan.model_validate(view.settings)
    return plan, [BatchTask.model_validate(view.tasks[t]) for t in view.pending()]


def run_batch(store: Store, settings: Settings, batch_id: str, *,
              on_attempt: Callable[[AttemptResult], None] = lambda r: None,
              options: PoolOptions | None = None,
              on_stopping: Callable[[], None] = lambda: None) -> list[AttemptResult]:
    """Run every task of the batch that has no model verdict yet."""
    plan, tasks = pending_tasks(store, batch_id)
    try:
        return run_pool(store, settings, batch_id, tasks, tasks_dir=Path(plan.tasks_dir),
                        model_urls=list(plan.model_urls), options=options or plan.options, on_attempt=on_attempt,
                        on_stopping=on_stopping)
    except StoreError as exc:
        raise StoreLost(
            f"{' '.join(str(exc).split())} -- batch {batch_id} stopped; once the store is back, finish it with:\n"
            f"  escrow batch --resume {batch_id[:12]}",
            batch_id=batch_id,
            location=store.url,
        ) from exc
