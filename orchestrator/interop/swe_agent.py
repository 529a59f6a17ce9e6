"""SWE-agent ``.traj`` files: ``trajectory`` (one step per model call:
response, thought, action, observation, execution time), ``history`` (the
messages as sent), ``info`` (exit status, submission, run totals in
``model_stats``) and ``replay_config``.

SWE-agent records no per-call usage, only the run's totals, which are kept
in ``info``; each call's figures are absent. The version is the history's
shape: "1" when messages carry ``message_type`` (SWE-agent 1.x), else "0".
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.interop.content import chat_completion_tool_calls, count, money, need, obj, text_of
from orchestrator.interop.records import (
    SourceMessage,
    SourceObservation,
    SourceTrajectory,
    SourceUsage,
    call_message,
    plain,
)

FORMAT = "swe-agent"
ROLES = {"system", "user", "assistant", "tool"}


def looks_like(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("trajectory"), list)
        and isinstance(doc.get("history"), list)
        and "info" in doc
    )


def replay_model(config: Any) -> str | None:
    """The model name in ``replay_config`` (a JSON string or object), if any."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return None
    model = (
        config.get("agent", {}).get("model")
        if isinstance(config, dict) and isinstance(config.get("agent"), dict)
        else None
    )
    name = model.get("name") if isinstance(model, dict) else None
    return name if isinstance(name, str) else None


def parse(doc: Any, name: str) -> list[SourceTrajectory]:
    need(doc, dict, "the top level", name)
    steps = need(doc.get("trajectory"), list, "'trajectory'", name)
    history = need(doc.get("history"), list, "'history'", name)
    info = obj(doc.get("info"))
    version = "1" if any(isinstance(h, dict) and "message_type" in h for h in history) else "0"
    first_assistant = next(
        (i for i, h in enumerate(history) if isinstance(h, dict) and h.get("role") == "assistant"), len(history)
    )
    leading = [h for h in history[:first_assistant] if isinstance(h, dict)]
    sent_assistant = [h for h in history if isinstance(h, dict) and h.get("role") == "assistant"]
    # The message that followed each assistant message in the history is its observation as the model saw it.
    sent_observation: list[dict[str, Any] | None] = []
    for i, h in enumerate(history):
        if isinstance(h, dict) and h.get("role") == "assistant":
            nxt = history[i + 1] if i + 1 < len(history) else None
            sent_observation.append(nxt if isinstance(nxt, dict) and nxt.get("role") in ("user", "tool") else None)
    messages: list[SourceMessage] = []
    for h in leading:
        role = h.get("role") if h.get("role") in ROLES else "user"
        messages.append(plain(str(role), text_of(h.get("content"))))
    for n, step in enumerate(steps):
        need(step, dict, f"trajectory[{n}]", name)
        sent = sent_assistant[n] if n < len(sent_assistant) else {}
        calls = chat_completion_tool_calls(sent.get("tool_calls"))
        content = text_of(sent.get("content")) if sent else text_of(step.get("response"))
        messages.append(
            call_message(content, calls, model=None, reasoning=step.get("thought") or None, duration_s=None)
        )
        if "observation" not in step and not (n < len(sent_observation) and sent_observation[n]):
            continue
        seen = sent_observation[n] if n < len(sent_observation) else None
        observed = text_of(seen.get("content")) if seen else text_of(step.get("observation"))
        action = str(step.get("action") or "")
        tool = calls[0].name if calls else (action.split()[0] if action.split() else "action")
        ids = (seen or {}).get("tool_call_ids") or [c.id for c in calls]
        call_id = str(ids[0]) if ids else None
        role = "tool" if call_id and calls else "user"
        messages.append(
            SourceMessage(
                message=plain(role, observed, tool_call_id=call_id if role == "tool" else None).message,
                observation=SourceObservation(
                    tool_name=tool, tool_call_id=call_id if role == "tool" else None, action=action or None
                ),
            )
        )
    task = next((text_of(h.get("content")) for h in leading if h.get("role") == "user" and not h.get("is_demo")), None)
    stats = obj(info.get("model_stats"))
    return [
        SourceTrajectory(
            format=FORMAT,
            version=version,
            source_id=str(doc.get("environment") or "") or None,
            task=task or "",
            model=replay_model(doc.get("replay_config")),
            messages=tuple(messages),
            run_usage=SourceUsage(prompt_tokens=count(stats.get("tokens_sent")),
                                  completion_tokens=count(stats.get("tokens_received")),
                                  cost_usd=money(stats.get("instance_cost"))) if stats else None,
            info={
                "exit_status": info.get("exit_status"),
                "submission": info.get("submission"),
                "model_stats": stats,
                "run_cost_usd": money(stats.get("instance_cost")),
            },
        )
    ]
