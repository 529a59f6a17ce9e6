"""mini-swe-agent trajectories: a bare message list (the oldest form, as in
mini-swe-agent's own test data), ``{"info", "messages", "trajectory_format":
"mini-swe-agent-1"}`` (v1) and ``"mini-swe-agent-1.1"`` (v2, whose messages
carry ``extra.actions``, ``extra.cost``, ``extra.returncode``).

Per-call usage is the raw API response kept in ``extra.response`` (LiteLLM's
shape); a message list has none. The observation of an action is the user
(or tool) message that follows the assistant message.
"""

from __future__ import annotations

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
from orchestrator.interop.errors import UnsupportedVersion
from orchestrator.interop.records import (
    SourceMessage,
    SourceObservation,
    SourceTrajectory,
    SourceUsage,
    call_message,
    plain,
)

FORMAT = "mini-swe-agent"
VERSIONS = ("mini-swe-agent-1", "mini-swe-agent-1.1")
LIST_VERSION = "message-list"


def looks_like(doc: Any) -> bool:
    if isinstance(doc, dict):
        declared = doc.get("trajectory_format")
        return (isinstance(declared, str) and declared.startswith("mini-swe-agent")) or (
            isinstance(doc.get("messages"), list)
            and isinstance(doc.get("info"), dict)
            and "mini_version" in doc["info"]
        )
    return isinstance(doc, list) and bool(doc) and all(isinstance(m, dict) and "role" in m for m in doc)


def assistant(message: dict[str, Any]) -> SourceMessage:
    extra = obj(message.get("extra"))
    response = obj(extra.get("response"))
    choices = response.get("choices") if isinstance(response.get("choices"), list) else []
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    return call_message(
        text_of(message.get("content")),
        chat_completion_tool_calls(message.get("tool_calls")),
        model=response.get("model"),
        usage=chat_completion_usage(response.get("usage"), money(extra.get("cost"))),
        finish_reason=first.get("finish_reason"),
        reasoning=message.get("reasoning_content"),
        at=epoch_seconds(extra.get("timestamp")) or epoch_seconds(response.get("created")),
    )


def observation(message: dict[str, Any], before: dict[str, Any] | None) -> SourceMessage:
    extra = obj(message.get("extra"))
    actions = (before or {}).get("extra", {}).get("actions") if isinstance((before or {}).get("extra"), dict) else None
    action = (
        actions[0].get("command") if isinstance(actions, list) and actions and isinstance(actions[0], dict) else None
    )
    role = "tool" if message.get("role") == "tool" else "user"
    tool_call_id = message.get("tool_call_id") if role == "tool" else None
    return SourceMessage(
        message=plain(role, text_of(message.get("content")), tool_call_id=tool_call_id).message,
        observation=SourceObservation(
            tool_name="bash",
            tool_call_id=tool_call_id,
            action=action,
            exit_code=count(extra.get("returncode")),
            at=epoch_seconds(extra.get("timestamp")),
        ),
    )


def parse(doc: Any, name: str) -> list[SourceTrajectory]:
    if isinstance(doc, list):
        version, raw_messages, info = LIST_VERSION, doc, {}
    else:
        need(doc, dict, "the top level", name)
        version = str(doc.get("trajectory_format") or "mini-swe-agent-1")
        if version not in VERSIONS:
            raise UnsupportedVersion(
                f"{name}: trajectory_format {version!r} is not one of {', '.join(VERSIONS)}", path=name, version=version
            )
        raw_messages = need(doc.get("messages"), list, "'messages'", name)
        info = obj(doc.get("info"))
    messages: list[SourceMessage] = []
    exit_extra: dict[str, Any] = {}
    before: dict[str, Any] | None = None
    for i, m in enumerate(raw_messages):
        need(m, dict, f"messages[{i}]", name)
        role = m.get("role")
        if role == "assistant":
            messages.append(assistant(m))
        elif role in ("user", "tool") and before is not None and before.get("role") == "assistant":
            messages.append(observation(m, before))
        elif role in ("system", "user", "tool"):
            messages.append(plain(role, text_of(m.get("content"))))
        elif role == "exit":
            # v2 closes with the agent's exit (status, submission, error): kept as a message, its status as the outcome.
            messages.append(plain("user", text_of(m.get("content"))))
            exit_extra = obj(m.get("extra"))
        else:
            messages.append(plain("user", text_of(m.get("content"))))
        before = m
    task = next((text_of(m.get("content")) for m in raw_messages if m.get("role") == "user"), "") or ""
    config = obj(info.get("config"))
    model_config = obj(config.get("model"))
    stats = obj(info.get("model_stats"))
    return [
        SourceTrajectory(
            format=FORMAT,
            version=version,
            source_id=doc.get("instance_id") if isinstance(doc, dict) else None,
            task=task,
            model=model_config.get("model_name"),
            messages=tuple(messages),
            run_usage=SourceUsage(cost_usd=money(stats.get("instance_cost"))) if "instance_cost" in stats else None,
            info={
                "exit_status": info.get("exit_status") or exit_extra.get("exit_status"),
                "submission": info.get("submission") or exit_extra.get("submission"),
                "model_stats": stats,
                "mini_version": info.get("mini_version"),
                "run_cost_usd": money(stats.get("instance_cost")),
            },
        )
    ]
