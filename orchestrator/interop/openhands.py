"""OpenHands V0 event streams: a JSON list of events, each an action
(``action``) or an observation (``observation``), from ``source`` user,
agent or environment.

An agent action that a model call produced carries ``tool_call_metadata``
with the raw LiteLLM ``model_response`` (usage included); several actions
from one response share it and make one call. An observation whose
``tool_call_metadata`` names a tool call id is that call's result. Events
that are neither messages nor tool results (agent state changes, nulls) are
counted in ``info.skipped_events``. V1 per-event files are not read.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from orchestrator.interop.content import (
    chat_completion_tool_calls,
    chat_completion_usage,
    count,
    epoch_seconds,
    money,
    need,
    obj,
    text_of,
)
from orchestrator.interop.records import (
    SourceMessage,
    SourceObservation,
    SourceTrajectory,
    SourceUsage,
    call_message,
    plain,
)

FORMAT = "openhands"
VERSION = "v0-event-list"
NOT_MESSAGES = {"agent_state_changed", "null", "change_agent_state", "recall"}


def looks_like(doc: Any) -> bool:
    return (
        isinstance(doc, list)
        and bool(doc)
        and all(isinstance(e, dict) and ("action" in e or "observation" in e) and "source" in e for e in doc)
    )


def response_call(event: dict[str, Any], response: dict[str, Any]) -> SourceMessage:
    choices = response.get("choices") if isinstance(response.get("choices"), list) else []
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = obj(first.get("message"))
    return call_message(
        text_of(message.get("content")),
        chat_completion_tool_calls(message.get("tool_calls")),
        model=response.get("model"),
        usage=chat_completion_usage(response.get("usage")),
        finish_reason=first.get("finish_reason"),
        reasoning=message.get("reasoning_content"),
        at=epoch_seconds(event.get("timestamp")),
    )


def metrics_usage(metrics: Any) -> SourceUsage | None:
    """OpenHands' accumulated ``llm_metrics``: the run-level totals."""
    if not isinstance(metrics, dict):
        return None
    acc = obj(metrics.get("accumulated_token_usage"))
    return SourceUsage(prompt_tokens=count(acc.get("prompt_tokens")), cached_tokens=count(acc.get("cache_read_tokens")),
                       completion_tokens=count(acc.get("completion_tokens")),
                       cost_usd=money(metrics.get("accumulated_cost")))


def parse(doc: Any, name: str) -> list[SourceTrajectory]:
    need(doc, list, "the event list", name)
    messages: list[SourceMessage] = []
    seen_responses: set[str] = set()
    skipped: Counter[str] = Counter()
    model = None
    last_metrics = None
    for i, event in enumerate(doc):
        need(event, dict, f"event [{i}]", name)
        last_metrics = event.get("llm_metrics") or last_metrics
        meta = event.get("tool_call_metadata") if isinstance(event.get("tool_call_metadata"), dict) else None
        if "observation" in event and isinstance(event.get("content"), str):
            text = event["content"]  # a tool's output as it was, empty included
        else:
            given = event.get("content") if "observation" in event else obj(event.get("args")).get("content")
            text = text_of(given) or text_of(event.get("message"))
        kind = str(event.get("action") or event.get("observation"))
        if "action" in event:
            if kind in NOT_MESSAGES:
                skipped[kind] += 1
            elif kind == "system":
                # The system prompt, recorded by the agent: a message, not a model call.
                messages.append(plain("system", text))
            elif event.get("source") == "agent" and meta and isinstance(meta.get("model_response"), dict):
                response = meta["model_response"]
                key = str(response.get("id") or id(response))
                if key not in seen_responses:
                    seen_responses.add(key)
                    messages.append(response_call(event, response))
                    model = model or response.get("model")
            elif event.get("source") == "agent":
                # An agent message recorded without its model response: a call whose figures are all absent.
                messages.append(call_message(text, at=epoch_seconds(event.get("timestamp"))))
            else:
                messages.append(plain("user", text))
            continue
        if kind in NOT_MESSAGES:
            skipped[kind] += 1
            continue
        extras = obj(event.get("extras"))
        metadata = obj(extras.get("metadata"))
        call_id = str(meta["tool_call_id"]) if meta and meta.get("tool_call_id") else None
        tool = str(meta.get("function_name")) if meta and meta.get("function_name") else kind
        messages.append(
            SourceMessage(
                message=plain(
                    "tool" if call_id else "user", text, tool_call_id=call_id, name=tool if call_id else None
                ).message,
                observation=SourceObservation(
                    tool_name=tool,
                    tool_call_id=call_id,
                    action=extras.get("command"),
                    exit_code=count(metadata.get("exit_code", extras.get("exit_code"))),
                    at=epoch_seconds(event.get("timestamp")),
                ),
            )
        )
    task = next((m.message.content for m in messages if m.message.role == "user" and m.observation is None), "") or ""
    return [
        SourceTrajectory(
            format=FORMAT,
            version=VERSION,
            task=task,
            model=model,
            messages=tuple(messages),
            run_usage=metrics_usage(last_metrics),
            info={"skipped_events": dict(skipped), "llm_metrics": last_metrics},
        )
    ]
