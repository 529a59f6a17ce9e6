"""One task of a batch, one attempt: repository, settings, lease, deadline,
and the run through the library entry point. Executor-agnostic: the local
pool calls it in a thread, a Ray worker in its own process.

Endings are sorted into three outcomes, so an infrastructure failure is never
counted as the model's: ``model`` (the run's verdict), ``infrastructure`` (a
sandbox that did not start, an unreachable dockerd or store: retried) and
``task`` (the row itself is unusable: reported, not retried).
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from orchestrator.agent import Verdict
from orchestrator.composition.batch.errors import RepoError
from orchestrator.composition.batch.repos import prepare_repo
from orchestrator.composition.batch.start_deadline import BoundedStart
from orchestrator.composition.batch.stopping import BatchStop
from orchestrator.composition.batch.tasks import BatchTask
from orchestrator.composition.launch import RunRequest, run_agent
from orchestrator.composition.launch.compose import kept_workspaces
from orchestrator.composition.launch.heartbeat import Heartbeat
from orchestrator.context.tokenizer import TokenCounter
from orchestrator.contract import Frozen
from orchestrator.errors import ConfigError, TemplateNotPrefixPreserving, TokenExactUnsupported
from orchestrator.ports import Model
from orchestrator.settings import Settings
from sandbox import Sandbox
from sandbox.kept import keep
from store import Store
from store.write import batches as bstore

# The verdict recorded for an attempt that ended in an infrastructure failure:
# the run-level verdict of the same meaning, also when no run could start.
INFRASTRUCTURE_FAILURE = Verdict.INFRA_ERROR.value
TASK_ERROR = "task"


class Deadlines(Frozen):
    """Separate limits: each command is bounded by the policy; these bound the rest."""

    task_s: float = 1800.0
    start_s: float = 300.0  # the sandbox start alone: past it, an infrastructure failure
    lease_s: float = 30.0


class AttemptResult(Frozen):
    task_id: str
    attempt_id: str = ""
    outcome: str
    verdict: str | None
    run_id: str | None
    error: str | None = None
    cost_usd: float = 0.0
    tokens: int = 0


def task_settings(settings: Settings, task: BatchTask, model_url: str) -> Settings:
    o = task.overrides
    updates: dict[str, object] = {"model_url": model_url.replace("{task_id}", task.id)}
    for name in ("max_turns", "budget_usd", "max_output_tokens"):
        if getattr(o, name) is not None:
            updates[name] = getattr(o, name)
    if o.policy is not None:
        updates["policy"] = Path(o.policy)
    return settings.model_copy(update=updates)


def run_attempt(
    store: Store, settings: Settings, batch_id: str, task: BatchTask, *, tasks_dir: Path, model_url: str,
    deadlines: Deadlines | None = None, admitted: Callable[[], None] = lambda: None,
    replica: str | None = None,
    around_model: Callable[[Model, TokenCounter], tuple[Model, TokenCounter]] = lambda m, c: (m, c),
    stop: BatchStop | None = None,
) -> AttemptResult:
    """Run ``task`` once and record the attempt. ``admitted`` is called once the
    sandbox is up (before the first model call) or the attempt is over, whichever is first.
    ``stop`` (Ctrl-C on the batch) cancels the run; the attempt then reads ``interrupted``."""
    deadlines = deadlines or Deadlines()
    stop = stop or BatchStop()
    attempt_id = bstore.start_attempt(store, batch_id, task.id, replica=replica)
    heartbeat = Heartbeat(store, deadlines.lease_s)
    cancel = threading.Event()
    timer = threading.Timer(task.overrides.task_timeout_s or deadlines.task_s, cancel.set)
    timer.daemon = True
    released = threading.Event()

    def admit(*_: object) -> None:
        if not released.is_set():
            released.set()
            admitted()

    bounded = BoundedStart(deadlines.start_s)

    def start_sandbox(*args: object, **kwargs: object) -> Sandbox:
        sandbox = bounded(*args, **kwargs)
        admit()  # up: the next start may begin while this run waits on the model
        return sandbox

    try:
        with tempfile.TemporaryDirectory(prefix=f"escrow-batch-{task.id[:20]}-") as work:
            try:
                # The run starts from (and records) a kept copy, not the scratch
                # one: a re-execution or fork of it needs its start after this.
                kept = keep(prepare_repo(task, tasks_dir, Path(work)), kept_workspaces(settings))
                timer.start()
                with stop.watching(cancel):
                    outcome = run_agent(task_settings(settings, task, model_url),
                                        RunRequest(task=task.task, repo=kept.path, verify=task.verify,
                                                   hidden=task.overrides.hidden or (),
                                                   verify_patch=task.verify_patch, workspace_sha256=kept.sha256,
                                                   required_tests=task.required_tests,
                                                   batch=bstore.batch_note(batch_id, task.id)),
                                        cancel=cancel, on_start=heartbeat.started, lease=heartbeat.claim(attempt_id),
                                        start_sandbox=start_sandbox,
                                        around_model=around_model)
            except (RepoError, ConfigError, TokenExactUnsupported, TemplateNotPrefixPreserving) as exc:
                # The task's own, found before its run is recorded: another try meets it again.
                return _finish(store, attempt_id, task, TASK_ERROR, heartbeat.run_id, None, exc)
            except Exception as exc:  # the run could not happen: infrastructure, retried by the executor
                if stop.stopped:
                    return _finish(store, attempt_id, task, bstore.INTERRUPTED, heartbeat.run_id, None, exc)
                return _finish(store, attempt_id, task, bstore.INFRASTRUCTURE, heartbeat.run_id,
                               INFRASTRUCTURE_FAILURE, exc)
    finally:
        timer.cancel()
        heartbeat.close()
        admit()
    result = outcome.result
    # A run that ended INFRA_ERROR (the sandbox died, the export failed) is
    # not the model's failure: the executor retries it like one that never started.
    ended = bstore.INFRASTRUCTURE if result.verdict is Verdict.INFRA_ERROR else bstore.MODEL
    if stop.stopped and result.verdict in (Verdict.CANCELED, Verdict.INFRA_ERROR):
        ended = bstore.INTERRUPTED  # the user stopped it: no verdict on the model, rerun on --resume
    error = result.detail if ended != bstore.MODEL else None
    bstore.finish_attempt(store, attempt_id, outcome=ended, run_id=outcome.run_id, verdict=result.verdict.value,
                          error=error)
    return AttemptResult(task_id=task.id, attempt_id=attempt_id, outcome=ended, verdict=result.verdict.value,
                         run_id=outcome.run_id, error=error, cost_usd=result.cost_usd, tokens=result.tokens)


def _finish(store: Store, attempt_id: str, task: BatchTask, outcome: str, run_id: str | None, verdict: str | None,
            exc: BaseException) -> AttemptResult:
    error = f"{type(exc).__name__}: {exc}"
    bstore.finish_attempt(store, attempt_id, outcome=outcome, run_id=run_id, verdict=verdict, error=error)
    return AttemptResult(task_id=task.id, attempt_id=attempt_id, outcome=outcome, verdict=verdict, run_id=run_id,
                         error=error)
