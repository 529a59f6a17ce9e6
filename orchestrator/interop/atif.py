"""ATIF trajectories (Harbor's Agent Trajectory Interchange Format), read
after validation against ``atif_schema``. An agent step is one model call
(message, reasoning, tool calls, per-step metrics: prompt tokens including
cached ones, completion tokens, cost, logprobs); its observation results
are the tool results, tied by ``source_call_id``."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from orchestrator.contract import ToolCall
from orchestrator.interop import atif_schema as schema
from orchestrator.interop.content import epoch_seconds, text_of
from orchestrator.interop.errors import UnreadableSource, UnsupportedVersion
from orchestrator.interop.records import (
    SourceMessage,
    SourceObservation,
    SourceTrajectory,
    SourceUsage,
    call_message,
    plain,
)

FORMAT = "atif"


def looks_like(doc: Any) -> bool:
    return isinstance(doc, dict) and str(doc.get("schema_version", "")).startswith("ATIF-")


def content_text(content: str | list[schema.ContentPart] | None) -> str | None:
    if isinstance(content, list):
        return text_of([p.model_dump(exclude_none=True) for p in content])
    return content


def observations(step: schema.Step) -> list[SourceMessage]:
    out = []
    names = {c.tool_call_id: c.function_name for c in step.tool_calls or ()}
    for result in step.observation.results if step.observation else ():
        call_id = result.source_call_id
        tool = names.get(call_id or "", "observation")
        role = "tool" if call_id else "user"
        out.append(
            SourceMessage(
                message=plain(
                    role, content_text(result.content), tool_call_id=call_id, name=tool if call_id else None
                ).message,
                observation=SourceObservation(tool_name=tool, tool_call_id=call_id, at=epoch_seconds(step.timestamp)),
            )
        )
    return out


def parse(doc: Any, name: str) -> list[SourceTrajectory]:
    version = doc.get("schema_version") if isinstance(doc, dict) else None
    if version not in schema.SCHEMA_VERSIONS:
        raise UnsupportedVersion(
            f"{name}: ATIF schema_version {version!r}; this Escrow reads {', '.join(schema.SCHEMA_VERSIONS)}",
            path=name,
            version=version,
        )
    try:
        trajectory = schema.Trajectory.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UnreadableSource(
            f"{name}: not valid {version}: {where}: {first['msg']} ({exc.error_count()} problem(s))", path=name
        ) from None
    messages: list[SourceMessage] = []
    for step in trajectory.steps:
        text = content_text(step.message)
        if step.source == "agent" and step.is_copied_context:
            # Context copied from an earlier conversation: a message, not a call of this trajectory.
            messages.append(plain("assistant", text))
        elif step.source == "agent":
            m = step.metrics or schema.Metrics()
            calls = tuple(
                ToolCall(
                    id=c.tool_call_id,
                    name=c.function_name,
                    arguments=json.dumps(c.arguments, ensure_ascii=False, sort_keys=True),
                )
                for c in step.tool_calls or ()
            )
            messages.append(
                call_message(
                    text,
                    calls,
                    model=step.model_name or trajectory.agent.model_name,
                    usage=SourceUsage(
                        prompt_tokens=m.prompt_tokens,
                        cached_tokens=m.cached_tokens,
                        completion_tokens=m.completion_tokens,
                        cost_usd=m.cost_usd,
                    ),
                    reasoning=step.reasoning_content,
                    at=epoch_seconds(step.timestamp),
                    logprobs=m.logprobs,
                )
            )
        else:
            messages.append(plain(step.source, text))
        messages += observations(step)
    task = next((content_text(s.message) for s in trajectory.steps if s.source == "user"), "") or ""
    return [
        SourceTrajectory(
            format=FORMAT,
            version=version,
            source_id=trajectory.session_id,
            task=task,
            model=trajectory.agent.model_name,
            messages=tuple(messages),
            run_usage=None if (f := trajectory.final_metrics) is None else SourceUsage(
                prompt_tokens=f.total_prompt_tokens, cached_tokens=f.total_cached_tokens,
                completion_tokens=f.total_completion_tokens, cost_usd=f.total_cost_usd),
            info={
                "agent": trajectory.agent.model_dump(exclude_none=True, exclude={"extra", "tool_definitions"}),
                "final_metrics": trajectory.final_metrics.model_dump(exclude_none=True)
                if trajectory.final_metrics
                else None,
                "notes": trajectory.notes,
            },
        )
    ]
