"""What a batch came to: counts, pass rate, cost and tokens per task, run time
percentiles, failures by verdict, infrastructure failures apart, and the slowest
and costliest tasks. Pure over a ``BatchView`` and the runs' summaries."""

from __future__ import annotations

from collections import Counter

from orchestrator.agent import Verdict
from orchestrator.contract import Frozen
from orchestrator.trajectory import RunSummary
from store.write.batches import INFRASTRUCTURE, INTERRUPTED, MODEL, STARTED, BatchView

# How an attempt whose sandbox missed ``--start-timeout`` is recorded: its
# error names the exception (``SandboxStartTimeout`` in start_deadline.py).
START_TIMEOUT = "SandboxStartTimeout"


def start_timed_out(error: str | None) -> bool:
    return bool(error and error.startswith(START_TIMEOUT + ":"))


class TaskLine(Frozen):
    task_id: str
    outcome: str
    verdict: str | None
    run_id: str | None
    attempts: int
    infra_failures: int
    start_timeouts: int
    seconds: float | None
    tokens: int
    cost_usd: float
    replica: str | None
    error: str | None

PASS, SUSPECT = Verdict.PASS.value, Verdict.SUSPECT.value


class BatchReport(Frozen):
    batch_id: str
    task_file: str
    n_tasks: int
    done: int
    passed: int
    pass_rate: float | None  # PASS over the tasks with a model verdict: SUSPECT is in ``done``, never a pass
    suspect: int = 0  # tasks whose latest verdict is SUSPECT (the verifier passed a patch that reached for it)
    running: int
    not_started: int
    infra_failures: int
    start_timeouts: int
    task_errors: int
    interrupted: int = 0  # the latest attempt was canceled by Ctrl-C on the batch
    verdicts: dict[str, int]
    cost_usd: float
    tokens: int
    p50_s: float | None
    p95_s: float | None
    slowest: tuple[str, ...]
    costliest: tuple[str, ...]
    tasks: tuple[TaskLine, ...]


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def batch_report(
    view: BatchView, summaries: dict[str, RunSummary], crashed: frozenset[str] | set[str] = frozenset()
) -> BatchReport:
    latest = view.latest()
    lines = []
    for task_id in view.tasks:
        tries = [a for a in view.attempts if a.task_id == task_id]
        last = latest.get(task_id)
        summary = summaries.get(last.run_id) if last and last.run_id else None
        outcome = "not started" if last is None else last.outcome
        if last is not None and last.outcome == STARTED and last.run_id in crashed:
            outcome = "crashed"
        seconds = None
        if summary and summary.run.finished_at:
            seconds = summary.run.finished_at - summary.run.created_at
        totals = summary.totals if summary else None
        lines.append(TaskLine(
            task_id=task_id, outcome=outcome, verdict=last.verdict if last else None,
            run_id=last.run_id if last else None, attempts=len(tries),
            infra_failures=sum(a.outcome == INFRASTRUCTURE for a in tries),
            start_timeouts=sum(a.outcome == INFRASTRUCTURE and start_timed_out(a.error) for a in tries),
            seconds=seconds,
            tokens=(totals.input_tokens + totals.output_tokens) if totals else 0,
            cost_usd=(totals.cost_usd or 0.0) if totals else 0.0, replica=last.replica if last else None,
            error=last.error if last else None,
        ))
    done = [line for line in lines if line.outcome == MODEL]
    passed = sum(line.verdict == PASS for line in done)
    times = [line.seconds for line in done if line.seconds is not None]
    return BatchReport(
        batch_id=view.id, task_file=view.task_file, n_tasks=len(lines), done=len(done), passed=passed,
        suspect=sum(line.verdict == SUSPECT for line in done), pass_rate=passed / len(done) if done else None,
        running=sum(line.outcome == STARTED for line in lines),
        not_started=sum(line.outcome == "not started" for line in lines),
        infra_failures=sum(line.infra_failures for line in lines),
        start_timeouts=sum(line.start_timeouts for line in lines),
        task_errors=sum(line.outcome == "task" for line in lines),
        interrupted=sum(line.outcome == INTERRUPTED for line in lines),
        verdicts=dict(Counter(line.verdict or "" for line in done)),
        cost_usd=sum(line.cost_usd for line in lines), tokens=sum(line.tokens for line in lines),
        p50_s=percentile(times, 50), p95_s=percentile(times, 95),
        slowest=tuple(line.task_id for line in sorted(done, key=lambda x: -(x.seconds or 0))[:5]),
        # Tasks that cost nothing are no one's costliest (five tasks of $0 were named).
        costliest=tuple(line.task_id for line in sorted(done, key=lambda x: -x.cost_usd)[:5] if line.cost_usd > 0),
        tasks=tuple(lines),
    )
