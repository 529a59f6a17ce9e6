"""A recorded run as an ATIF trajectory (Harbor's Agent Trajectory
Interchange Format), validated against the schema version it declares.

The first call's request messages become system and user steps (assistant
and tool messages in it are marked ``is_copied_context``), and so do those of
a call that starts a conversation of its own; each answered
call becomes an agent step with its text, reasoning (an imported run's
``source_reasoning`` event), tool calls, and metrics, the tool executions
of its candidates its observation; messages a turn appended that are not
observations become user steps. Figures recorded as ``absent`` are left
out, never written as 0.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from orchestrator import __version__
from orchestrator.contract import Message
from orchestrator.interop import atif_schema as schema
from orchestrator.trajectory import SOURCE_REASONING_EVENT, CallView, ToolExecutionView, Trajectory
from store.read.reports.export import ExportError, run_reward
from store.read.reports.run_report import counted_of

AGENT_NAME = "escrow"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat()


def arguments_object(raw: str) -> dict[str, Any]:
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"raw": raw}
    return parsed if isinstance(parsed, dict) else {"raw": raw}


def context_step(message: Message, step_id: int) -> dict[str, Any]:
    if message.role in ("system", "user"):
        return {"step_id": step_id, "source": message.role, "message": message.content or ""}
    extra: dict[str, Any] = {
        "role": message.role,
        **({"tool_call_id": message.tool_call_id} if message.tool_call_id else {}),
    }
    if message.tool_calls:
        extra["tool_calls"] = [c.model_dump() for c in message.tool_calls]
    source = "agent" if message.role == "assistant" else "user"
    return {
        "step_id": step_id,
        "source": source,
        "message": message.content or "",
        "is_copied_context": True,
        "extra": extra,
    }


def metrics(call: CallView) -> dict[str, Any] | None:
    r = call.response
    assert r is not None
    out: dict[str, Any] = {}
    if r.input_tokens_source != "absent":
        out["prompt_tokens"] = r.input_tokens
    if r.output_tokens_source != "absent":
        out["completion_tokens"] = r.output_tokens
    if r.cached_input_tokens_source != "absent":
        out["cached_tokens"] = r.cached_input_tokens
    if r.cost_usd is not None:
        out["cost_usd"] = r.cost_usd
    logprobs = r.envelope().logprobs
    if logprobs and all(isinstance(v, (int, float)) for v in logprobs):
        out["logprobs"] = list(logprobs)
    return out or None


def agent_step(
    call: CallView,
    executions: list[ToolExecutionView],
    tool_call_ids: dict[str, str | None],
    reasoning: str | None,
    step_id: int,
) -> dict[str, Any]:
    r = call.response
    assert r is not None
    envelope = r.envelope()
    step: dict[str, Any] = {
        "step_id": step_id,
        "timestamp": iso(call.created_at),
        "source": "agent",
        "model_name": r.response_model or call.request_model,
        "message": envelope.payload.text,
    }
    if reasoning:
        step["reasoning_content"] = reasoning
    calls = [
        {"tool_call_id": c.id, "function_name": c.name, "arguments": arguments_object(c.arguments)}
        for c in envelope.payload.tool_calls
    ]
    if calls:
        step["tool_calls"] = calls
    known = {c["tool_call_id"] for c in calls}
    results = []
    for e in executions:
        call_id = tool_call_ids.get(e.candidate_id)
        results.append({"source_call_id": call_id if call_id in known else None, "content": e.observation})
    if results:
        step["observation"] = {"results": results}
    figures = metrics(call)
    if figures:
        step["metrics"] = figures
    extra = {"status": r.status, "finish_reason": envelope.finish_reason}
    step["extra"] = {k: v for k, v in extra.items() if v is not None}
    return step


def to_atif(trajectory: Trajectory) -> dict[str, Any]:
    """The run as an ATIF document, checked against ``atif_schema.LATEST``."""
    run = trajectory.run
    calls = sorted((c for t in trajectory.turns for c in t.calls if c.response is not None), key=lambda c: c.seq)
    if not calls:
        raise ExportError(f"run {run.id} recorded no answered model call; ATIF needs at least one step", run_id=run.id)
    steps: list[dict[str, Any]] = []
    opening = calls[0].request().messages
    for message in opening:
        steps.append(context_step(message, len(steps) + 1))
    for record in trajectory.turns:
        tool_call_ids = {c.id: c.tool_call_id for c in record.candidates}
        candidate_call = {c.id: c.call_id for c in record.candidates}
        reasoning = [e.data.get("text") for e in record.events if e.kind == SOURCE_REASONING_EVENT]
        answered = [c for c in record.calls if c.response is not None]
        for i, call in enumerate(sorted(answered, key=lambda c: c.seq)):
            request = call.request().messages
            if request[:1] != opening[:1]:
                # A call that starts a conversation of its own (an Inspect scorer's): its messages come first.
                opening = request
                steps += [context_step(m, len(steps) + 1 + k) for k, m in enumerate(request)]
            executions = [e for e in record.tool_executions if candidate_call.get(e.candidate_id) == call.id]
            steps.append(
                agent_step(
                    call, executions, tool_call_ids, reasoning[i] if i < len(reasoning) else None, len(steps) + 1
                )
            )
        observed = [e.observation for e in record.tool_executions]
        for message in (record.committed.messages() if record.committed else ())[1:]:
            if message.role == "assistant":
                continue
            if observed and message.content == observed[0]:
                observed.pop(0)
                continue
            if message.role in ("user", "system"):
                steps.append({"step_id": len(steps) + 1, "source": message.role, "message": message.content or ""})
    responses = [c.response for c in calls if c.response is not None]
    final: dict[str, Any] = {}
    for name, value, source in (("total_prompt_tokens", "input_tokens", "input_tokens_source"),
                                ("total_completion_tokens", "output_tokens", "output_tokens_source"),
                                ("total_cached_tokens", "cached_input_tokens", "cached_input_tokens_source")):
        counted = [getattr(r, value) for r in responses if getattr(r, source) != "absent"]
        if counted:  # a total no call reported is left out (absent), not written 0
            final[name] = sum(counted)
    final["total_steps"] = len(steps)
    costs = [r.cost_usd for r in responses if r.cost_usd is not None]
    if costs:
        final["total_cost_usd"] = sum(costs)
    # An imported run's run-level figures that no call gives count in its totals, as in its report.
    run_level = counted_of(trajectory)
    for name, key in (("total_prompt_tokens", "prompt_tokens"), ("total_completion_tokens", "completion_tokens"),
                      ("total_cached_tokens", "cached_tokens"), ("total_cost_usd", "cost_usd")):
        if run_level and run_level.get(key) is not None:
            final[name] = final.get(name, 0) + run_level[key]
    document = {
        "schema_version": schema.LATEST,
        "session_id": run.id,
        "agent": {"name": AGENT_NAME, "version": run.escrow_version or __version__, "model_name": run.request_model},
        "steps": steps,
        "final_metrics": final,
        "extra": {
            "escrow_run": {
                "mode": run.mode,
                "status": run.status,
                "verdict": run.verdict,
                **run_reward(trajectory),
                "task": run.task,
                "import": run.config.get("import"),
            }
        },
    }
    try:
        schema.Trajectory.model_validate(document)
    except ValidationError as exc:
        raise ExportError(
            f"run {run.id} does not make a valid {schema.LATEST} document: {exc.errors()[0]['msg']}", run_id=run.id
        ) from None
    return document
