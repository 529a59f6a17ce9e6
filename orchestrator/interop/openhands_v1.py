"""OpenHands V1 (software-agent-sdk) conversation folders: ``base_state.json``
and one file per event, ``events/event-NNNNN-<uuid>.json``, in file order.

Events: ``SystemPromptEvent`` / ``SystemPromptUpdateEvent`` (a system
message), ``MessageEvent`` (a user message, or an agent one a model call
produced), ``ActionEvent`` (a tool call; the actions of one model response
share its ``llm_response_id`` and make one call), ``ObservationEvent`` and
``AgentErrorEvent`` (a tool's result, by ``tool_call_id``). Other kinds are
counted in ``info.skipped_events``. Usage is not in the events: the state's
``stats.usage_to_metrics`` holds per-response token usages and latencies
(by response id) and the costs, in call order, without ids: a cost is tied
to a response only when there are as many costs as token usages. Its
accumulated figures are the run-level totals.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from orchestrator.contract import ToolCall
from orchestrator.interop.content import arguments_text, count, epoch_seconds, money, need, obj, text_of
from orchestrator.interop.errors import UnreadableSource
from orchestrator.interop.records import (
    SourceCall,
    SourceMessage,
    SourceObservation,
    SourceTrajectory,
    SourceUsage,
    plain,
)
from orchestrator.interop.safe_read import parse_json

FORMAT = "openhands"
VERSION = "v1-event-folder"
STATE = "base_state.json"
EVENT_FILE = re.compile(r"^events/event-(\d+)-[^/]*\.json$")


def looks_like(files: Mapping[str, bytes]) -> bool:
    return STATE in files and any(EVENT_FILE.match(path) for path in files)


def wanted(path: str) -> bool:
    """The files of a conversation folder that are read (not the lock file, not other folders)."""
    return path == STATE or EVENT_FILE.match(path) is not None


class Metrics:
    """The state's per-response figures: usage, latency, cost, model."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.usage: dict[str, SourceUsage] = {}
        self.latency: dict[str, float] = {}
        self.model: dict[str, str] = {}
        totals = {"prompt": 0, "cached": 0, "completion": 0}
        cost_total: float | None = None
        for metrics in obj(obj(state.get("stats")).get("usage_to_metrics")).values():
            metrics = obj(metrics)
            usages = [obj(u) for u in metrics.get("token_usages") or [] if isinstance(u, dict)]
            costs = [money(obj(c).get("cost")) for c in metrics.get("costs") or []]
            paired = len(costs) == len(usages)
            for i, u in enumerate(usages):
                rid = u.get("response_id")
                if not isinstance(rid, str) or not rid:
                    continue
                self.usage[rid] = SourceUsage(
                    prompt_tokens=count(u.get("prompt_tokens")),
                    cached_tokens=count(u.get("cache_read_tokens")),
                    completion_tokens=count(u.get("completion_tokens")),
                    cost_usd=costs[i] if paired else None,
                )
                if isinstance(u.get("model"), str):
                    self.model[rid] = u["model"]
            for lat in metrics.get("response_latencies") or []:
                lat = obj(lat)
                if isinstance(lat.get("response_id"), str) and money(lat.get("latency")) is not None:
                    self.latency[lat["response_id"]] = float(lat["latency"])
            acc = obj(metrics.get("accumulated_token_usage"))
            totals["prompt"] += count(acc.get("prompt_tokens")) or 0
            totals["cached"] += count(acc.get("cache_read_tokens")) or 0
            totals["completion"] += count(acc.get("completion_tokens")) or 0
            cost = money(metrics.get("accumulated_cost"))
            if cost is not None:
                cost_total = (cost_total or 0.0) + cost
        self.run = SourceUsage(prompt_tokens=totals["prompt"], cached_tokens=totals["cached"],
                               completion_tokens=totals["completion"], cost_usd=cost_total) if self.usage else None


def event_text(event: dict[str, Any]) -> str | None:
    message = obj(event.get("llm_message"))
    return text_of(message.get("content"))


def reasoning_of(event: dict[str, Any]) -> str | None:
    parts = [text_of(event.get("reasoning_content")), text_of(event.get("thought")) or None]
    parts += [str(b.get("thinking")) for b in event.get("thinking_blocks") or [] if isinstance(b, dict)
              and b.get("thinking")]
    message = obj(event.get("llm_message"))
    parts.append(text_of(message.get("reasoning_content")))
    found = [p for p in parts if p]
    return "\n".join(found) if found else None


def call_of(event: dict[str, Any], metrics: Metrics, content: str | None, tool_calls: tuple[ToolCall, ...],
            reasoning: str | None) -> SourceMessage:
    rid = event.get("llm_response_id") if isinstance(event.get("llm_response_id"), str) else None
    return SourceMessage(
        message=plain("assistant", content, tool_calls=tool_calls).message,
        call=SourceCall(
            model=metrics.model.get(rid or ""),
            usage=metrics.usage.get(rid or "", SourceUsage()),
            reasoning=reasoning,
            at=epoch_seconds(event.get("timestamp")),
            duration_s=metrics.latency.get(rid or ""),
        ),
    )


def tool_call_of(event: dict[str, Any], i: int) -> ToolCall:
    raw = obj(event.get("tool_call"))
    return ToolCall(
        id=str(raw.get("id") or event.get("tool_call_id") or f"call_{i}"),
        name=str(raw.get("name") or event.get("tool_name") or ""),
        arguments=arguments_text(raw.get("arguments") if "arguments" in raw else obj(event.get("action"))),
    )


def observation_of(event: dict[str, Any]) -> SourceMessage:
    observation = obj(event.get("observation"))
    error = event.get("error") if isinstance(event.get("error"), str) else None
    text = error if event.get("kind") == "AgentErrorEvent" else text_of(observation.get("content"))
    call_id = str(event["tool_call_id"]) if event.get("tool_call_id") else None
    tool = str(event.get("tool_name") or observation.get("kind") or "tool")
    exit_code = count(observation.get("exit_code"))
    return SourceMessage(
        message=plain("tool" if call_id else "user", text or "", tool_call_id=call_id,
                      name=tool if call_id else None).message,
        observation=SourceObservation(
            tool_name=tool, tool_call_id=call_id, action=observation.get("command"), exit_code=exit_code,
            error=error or ("tool reported an error" if observation.get("is_error") is True else None),
            at=epoch_seconds(event.get("timestamp")),
        ),
    )


def parse(files: Mapping[str, bytes], name: str) -> list[SourceTrajectory]:
    state = need(parse_json(files[STATE], f"{name}/{STATE}"), dict, STATE, name)
    numbered = sorted((int(m.group(1)), path) for path in files if (m := EVENT_FILE.match(path)))
    if not numbered:
        raise UnreadableSource(f"{name}: no events/event-*.json files", path=name)
    metrics = Metrics(state)
    messages: list[SourceMessage] = []
    skipped: Counter[str] = Counter()
    pending: list[dict[str, Any]] = []  # the action events of one model response
    times: list[float] = []

    def flush() -> None:
        if pending:
            first = pending[0]
            calls = tuple(tool_call_of(e, i) for i, e in enumerate(pending))
            messages.append(call_of(first, metrics, None, calls, reasoning_of(first)))
            pending.clear()

    for _, path in numbered:
        event = need(parse_json(files[path], f"{name}/{path}"), dict, path, name)
        kind = event.get("kind")
        if (at := epoch_seconds(event.get("timestamp"))) is not None:
            times.append(at)
        if kind != "ActionEvent" or (pending and pending[0].get("llm_response_id") != event.get("llm_response_id")):
            flush()
        if kind in ("SystemPromptEvent", "SystemPromptUpdateEvent"):
            messages.append(plain("system", text_of(obj(event.get("system_prompt")).get("text"))
                                  or text_of(event.get("system_prompt"))))
        elif kind == "MessageEvent" and event.get("source") == "agent":
            messages.append(call_of(event, metrics, event_text(event), (), reasoning_of(event)))
        elif kind == "MessageEvent":
            messages.append(plain("user", event_text(event)))
        elif kind == "ActionEvent":
            pending.append(event)
        elif kind in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation"):
            messages.append(observation_of(event))
        else:
            skipped[str(kind)] += 1
    flush()
    llm = obj(obj(state.get("agent")).get("llm"))
    task = next((m.message.content for m in messages if m.message.role == "user" and m.observation is None), "") or ""
    return [
        SourceTrajectory(
            format=FORMAT,
            version=VERSION,
            source_id=state.get("id") if isinstance(state.get("id"), str) else None,
            task=task,
            model=llm.get("model") if isinstance(llm.get("model"), str) else None,
            messages=tuple(messages),
            run_usage=metrics.run,
            started_at=min(times) if times else None,
            ended_at=max(times) if times else None,
            info={"skipped_events": dict(skipped), "execution_status": state.get("execution_status"),
                  "stats": state.get("stats")},
        )
    ]
