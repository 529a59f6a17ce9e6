"""The library entry point: one agent run from Settings and a request, its
result returned. Batch executors (local pool, Ray workers) call only this.

    from cli.batch.entry import RunRequest, run_one
    outcome = run_one(load_settings(None, model_url=URL), RunRequest(task="...", repo=Path("."), verify="pytest -q"))
    outcome.run_id, outcome.result.verdict

It imports no typer and no rich. For now it delegates to the composition that
``escrow run`` uses (``cli.run_session.execute_run``, which imports neither);
that composition moves here, behind this same signature.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from cli.run_session import Progress, RunOutcome, execute_run
from orchestrator.contract import Frozen
from orchestrator.settings import Settings

__all__ = ["Progress", "RunOutcome", "RunRequest", "run_one"]


class RunRequest(Frozen):
    task: str
    repo: Path
    verify: str
    apply: bool = False


def run_one(
    settings: Settings, request: RunRequest, *, progress: Progress | None = None,
    cancel: threading.Event | None = None, on_start: Callable[[str], None] | None = None,
) -> RunOutcome:
    """Run the agent once; every ending after the run is recorded is a verdict.
    Raises typed errors (ConfigError, SandboxError, StoreError) for what fails before."""
    return execute_run(settings, task=request.task, repo=request.repo, verifier=request.verify, apply=request.apply,
                       progress=progress, cancel=cancel, on_start=on_start)
