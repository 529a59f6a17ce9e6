"""The batch pages: every batch with its pass rate, and one batch's pass
matrix (its tasks against their attempts, each linking to its run), cost
and tokens per task, failures grouped by verdict and infrastructure
failures apart. The figures come from ``orchestrator.composition.batch.report``, the
same report ``escrow batch report`` prints."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from orchestrator.composition.batch.report import BatchReport, TaskLine, batch_report
from store import RunNotFound, Store
from store.read.liveness import crashed_runs
from store.write import batches as bstore
from store.write.batches import INFRASTRUCTURE, AttemptView, BatchView

PER_PAGE = 50


class UnknownBatch(RunNotFound):
    """No batch with that id (or unique prefix): a 404 page, like a run."""


@dataclass(frozen=True)
class TaskRow:
    line: TaskLine
    attempts: tuple[AttemptView, ...]
    """Every try of the task, first to latest: the row of the pass matrix."""


@dataclass(frozen=True)
class BatchShown:
    view: BatchView
    report: BatchReport
    rows: tuple[TaskRow, ...]
    columns: int
    """Attempts of the most-tried task: the pass matrix's width."""
    failures: dict[str, tuple[TaskLine, ...]]
    """Tasks whose latest attempt has a model verdict other than PASS, by verdict."""
    infrastructure: tuple[AttemptView, ...]
    """Attempts that failed for infrastructure: retried, never a model failure."""


def shown(view: BatchView, report: BatchReport) -> BatchShown:
    tries: dict[str, list[AttemptView]] = defaultdict(list)
    for attempt in sorted(view.attempts, key=lambda a: (a.task_id, a.number)):
        tries[attempt.task_id].append(attempt)
    rows = tuple(TaskRow(line=line, attempts=tuple(tries[line.task_id])) for line in report.tasks)
    failures: dict[str, list[TaskLine]] = defaultdict(list)
    for line in report.tasks:
        if line.outcome == bstore.MODEL and line.verdict != "PASS":
            failures[line.verdict or "no verdict"].append(line)
    return BatchShown(
        view=view, report=report, rows=rows, columns=max((len(r.attempts) for r in rows), default=0),
        failures={k: tuple(v) for k, v in sorted(failures.items())},
        infrastructure=tuple(a for a in view.attempts if a.outcome == INFRASTRUCTURE),
    )


def resolve(store: Store, ref: str) -> str:
    """A batch id from an id or a unique prefix; UnknownBatch otherwise."""
    if bstore.load_batch(store, ref) is not None:
        return ref
    found = bstore.resolve_batch(store, ref)
    if found is None:
        raise UnknownBatch(f"no batch (or more than one) matches {ref!r}", batch=ref)
    return found


def report(store: Store, batch_id: str) -> tuple[BatchView, BatchReport]:
    """The batch and its report, as ``escrow batch report`` makes it."""
    view = bstore.load_batch(store, batch_id)
    if view is None:
        raise UnknownBatch(f"no batch {batch_id!r}", batch=batch_id)
    run_ids = [a.run_id for a in view.latest().values() if a.run_id]
    summaries = {s.run.id: s for s in store.summaries(run_ids)} if run_ids else {}
    return view, batch_report(view, summaries, crashed_runs(store))


def batch_shown(store: Store, ref: str) -> BatchShown:
    return shown(*report(store, resolve(store, ref)))


def listed(store: Store, page: int, ids: list[str] | None = None) -> tuple[list[BatchReport], int]:
    """One page of batches (newest first) with their reports, and the page
    count; or, given ``ids`` (a bundle's batches), those on one page."""
    if ids is not None:
        return [report(store, i)[1] for i in ids], 1
    found, total = bstore.list_batches(store, page=page, per_page=PER_PAGE)
    return [report(store, i)[1] for i in found], max(1, -(-total // PER_PAGE))
