"""One run's figures as costing reads them (``orchestrator.costing.figures``);
pricing them is the composition's (``orchestrator.launch.reports``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from orchestrator.costing.figures import CallFigures, ToolFigures
from orchestrator.trajectory import CallView, ToolExecutionView, Trajectory

CLAMP_FIELD = '"cached_prompt_tokens_reported"'


def call_figures(calls: Iterable[CallView]) -> list[CallFigures]:
    out = []
    for call in calls:
        r = call.response
        if r is None:
            out.append(CallFigures(turn=call.turn, model=call.request_model))
            continue
        out.append(CallFigures(
            turn=call.turn, model=call.request_model, status=r.status, prompt_tokens=r.input_tokens,
            cached_prompt_tokens=r.cached_input_tokens, completion_tokens=r.output_tokens,
            prompt_source=r.input_tokens_source, ttft_s=r.ttft_s, decode_s=r.decode_s, total_s=r.total_s,
            attempt_s=tuple(a.duration_s for a in call.attempts),
            wait_s=sum(a.backoff_s for a in call.attempts), retries=max(0, r.n_attempts - 1),
            # Parsed only where the envelope holds it: nearly no call is clamped.
            cached_reported=r.envelope().usage.cached_prompt_tokens_reported
            if CLAMP_FIELD in r.envelope_json else None,
        ))
    return out


def tool_figures(executions: Iterable[ToolExecutionView]) -> list[ToolFigures]:
    grouped: dict[int | None, list[float]] = defaultdict(list)
    for e in executions:
        grouped[e.turn].append(e.duration_s or 0.0)
    return [ToolFigures(turn=turn, count=len(s), seconds=sum(s)) for turn, s in grouped.items()]


def engines_of(trajectory: Trajectory) -> tuple[str, ...]:
    """The engines recorded for a run: the provenance event's label and
    settings, and every engine named on its responses."""
    found: list[str] = []
    for event in trajectory.run_events:
        if event.kind == "engine" and isinstance(event.data.get("engine"), str):
            version = event.data.get("version")
            settings = ", ".join(f"{k} {v}" for k, v in sorted((event.data.get("settings") or {}).items()))
            found.append(
                f"{event.data['engine']}{' ' + version if version else ''}{f' ({settings})' if settings else ''}"
            )
    named = {
        c.response.engine
        for record in trajectory.turns
        for c in record.calls
        if c.response is not None and c.response.engine
    }
    found += sorted(e for e in named if not any(f.startswith(e) for f in found))
    return tuple(found)
