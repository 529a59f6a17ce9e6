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

from orchestrator.composition.launch.compose import RunRequest
from orchestrator.composition.launch.live_run import Progress, RunOutcome, run_agent

__all__ = ["Progress", "RunOutcome", "RunRequest", "run_agent"]
