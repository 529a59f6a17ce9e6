"""The library entry point: one agent run from Settings and a request, its
result returned. ``escrow run``, the batch executors (local pool, Ray
workers), tests and benches all call ``run_agent``::

    from pathlib import Path
    from orchestrator.composition.launch import RunRequest, run_agent
    from orchestrator.settings import load_settings

    settings = load_settings(None, model_url="http://127.0.0.1:8088/v1")
    outcome = run_agent(settings, RunRequest(task="fix mean()", repo=Path("."), verify="pytest -q"))
    print(outcome.run_id, outcome.result.verdict)

This package composes the adapters (model client, sandbox, store) around the
core loop. It imports no typer and no rich; the CLI only parses flags into
Settings, calls this and renders the outcome.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.composition.launch.compose import RunRequest
    from orchestrator.composition.launch.live_run import Progress, RunOutcome, run_agent

__all__ = ["Progress", "RunOutcome", "RunRequest", "run_agent"]

# Loaded on first use: the reports, replay and verify commands import this
# package's light modules, and a run's composition (Docker, the model
# client, the sandbox) would otherwise cost each of them its import time.
_HOMES = {"RunRequest": "compose", "Progress": "live_run", "RunOutcome": "live_run", "run_agent": "live_run"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
