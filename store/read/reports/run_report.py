"""One run's figures as costing reads them (``orchestrator.costing.figures``);
pricing them is the composition's (``orchestrator.composition.launch.reports``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from orchestrator.costing.figures import ESCROW_SOURCE, TOKEN_FIGURES, CallFigures, ToolFigures
from orchestrator.grammar import NOT_HONOURED, ConstraintUse
from orchestrator.interop.records import IMPORT_MODE
from orchestrator.source_figures import IMPORT_EVENT, RUN_LEVEL, counted_run_level
from orchestrator.trajectory import CallView, EventView, ToolExecutionView, Trajectory

CLAMP_FIELD = '"cached_prompt_tokens_reported"'
RUN_LEVEL_STATUS = "RUN_LEVEL"


def constraint_of(trajectory: Trajectory) -> ConstraintUse | None:
    """The run's constrained decoding (its spec's constraint, sent with every
    request) and how many answers broke it; None for an unconstrained run."""
    spec = trajectory.run.config.get("spec")
    constraint = spec.get("constraint") if isinstance(spec, dict) else None
    if not isinstance(constraint, dict):
        return None
    loosened = constraint.get("loosened")
    return ConstraintUse(
        kind=str(constraint.get("kind")), engine=str(constraint.get("engine")),
        calls=sum(len(t.calls) for t in trajectory.turns),
        not_honoured=sum(1 for t in trajectory.turns for e in t.events if e.kind == NOT_HONOURED),
        loosened=len(loosened) if isinstance(loosened, list) else 0,
    )


def call_figures(calls: Iterable[CallView]) -> list[CallFigures]:
    out = []
    for call in calls:
        r = call.response
        if r is None:  # in flight when the run stopped: no figure came back
            out.append(CallFigures(turn=call.turn, model=call.request_model, absent=frozenset(TOKEN_FIGURES)))
            continue
        sources = (r.input_tokens_source, r.cached_input_tokens_source, r.output_tokens_source)
        out.append(CallFigures(
            turn=call.turn, model=call.request_model, status=r.status, prompt_tokens=r.input_tokens,
            cached_prompt_tokens=r.cached_input_tokens, completion_tokens=r.output_tokens,
            prompt_source=r.input_tokens_source, ttft_s=r.ttft_s, decode_s=r.decode_s, total_s=r.total_s,
            attempt_s=tuple(a.duration_s for a in call.attempts),
            wait_s=sum(a.backoff_s for a in call.attempts), retries=max(0, r.n_attempts - 1), source_usd=r.cost_usd,
            # Parsed only where the envelope holds it: nearly no call is clamped.
            cached_reported=r.envelope().usage.cached_prompt_tokens_reported
            if CLAMP_FIELD in r.envelope_json else None,
            absent=frozenset(name for name, source in zip(TOKEN_FIGURES, sources, strict=True) if source == "absent"),
        ))
    return out


def source_of(trajectory: Trajectory) -> str:
    """"escrow", or an imported run's source format."""
    found = trajectory.run.config.get("import") if trajectory.run.mode == IMPORT_MODE else None
    return str(found.get("format") or IMPORT_MODE) if isinstance(found, dict) else ESCROW_SOURCE


def import_event(trajectory: Trajectory) -> EventView | None:
    """An imported run's event of provenance (its source's run-level data); None for Escrow's own runs."""
    return next((e for e in trajectory.run_events if e.kind == IMPORT_EVENT), None)


def counted_of(trajectory: Trajectory) -> dict[str, Any] | None:
    """An imported run's run-level figures that count in its totals (no call
    gives them), as its import event records them, or None."""
    event = import_event(trajectory)
    return counted_run_level(event.data_json) if event is not None else None


def run_level_of(trajectory: Trajectory) -> tuple[CallFigures | None, dict[str, Any] | None]:
    """An imported run's run-level figures that count (no call gives them),
    as one figure line, and all of the source's run-level totals."""
    event = import_event(trajectory)
    level = event.data.get(RUN_LEVEL) if event is not None else None
    if not isinstance(level, dict):
        return None, None
    counted, reported = level.get("counted"), level.get("reported")
    figures = None
    if isinstance(counted, dict):
        prompt = counted.get("prompt_tokens")
        figures = CallFigures(
            turn=None, model=trajectory.run.request_model, status=RUN_LEVEL_STATUS, prompt_tokens=prompt or 0,
            # "absent" keeps it out of the cache comparison, which is over calls; "server": the source's figure.
            prompt_source="absent" if prompt is None else "server",
            cached_prompt_tokens=counted.get("cached_tokens") or 0,
            completion_tokens=counted.get("completion_tokens") or 0, source_usd=counted.get("cost_usd"),
            absent=frozenset(name for name in TOKEN_FIGURES if counted.get(name) is None),
        )
    return figures, reported if isinstance(reported, dict) else None


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
