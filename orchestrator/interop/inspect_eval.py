"""Inspect ``.eval`` logs: a zip with ``header.json`` (log version, eval
spec, model) and ``samples/*.json``, one per sample and epoch, each one
trajectory. Messages come from the sample's events in order: a ``model``
event's input (resolved from ``attachment://`` references and, in version
3 logs, from ``input_refs`` ranges into ``message_pool``) and its output
with ``usage``; a ``tool`` event is an observation. A model call whose input
does not continue the conversation so far (a scorer's) starts a new one.

Usage follows Inspect's ModelUsage: ``input_tokens`` exclude the cache
reads and writes, so Escrow's prompt tokens are their sum and its cached
tokens the reads.
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.contract import Message, ToolCall
from orchestrator.interop.content import arguments_text, count, epoch_seconds, money, obj, text_of
from orchestrator.interop.errors import FormatMismatch, UnreadableSource, UnsupportedVersion
from orchestrator.interop.records import (
    SourceMessage,
    SourceObservation,
    SourceTrajectory,
    SourceUsage,
    call_message,
    plain,
)
from orchestrator.interop.safe_read import ReadLimits, SafeZip

FORMAT = "inspect"
VERSIONS = (1, 2, 3)
ROLES = {"system", "user", "assistant", "tool"}
ATTACHMENT = re.compile(r"attachment://([0-9a-f]{32})")


def looks_like(data: bytes) -> bool:
    return data[:4] == b"PK\x03\x04"


def resolve(value: Any, attachments: dict[str, str]) -> Any:
    if isinstance(value, str):
        return (
            ATTACHMENT.sub(lambda m: attachments.get(m.group(1), m.group(0)), value)
            if "attachment://" in value
            else value
        )
    if isinstance(value, list):
        return [resolve(v, attachments) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, attachments) for k, v in value.items()}
    return value


def inspect_usage(usage: Any) -> SourceUsage:
    if not isinstance(usage, dict):
        return SourceUsage()
    fresh, read, write = (
        count(usage.get("input_tokens")),
        count(usage.get("input_tokens_cache_read")),
        count(usage.get("input_tokens_cache_write")),
    )
    prompt = None if fresh is None else fresh + (read or 0) + (write or 0)
    return SourceUsage(
        prompt_tokens=prompt,
        cached_tokens=read,
        completion_tokens=count(usage.get("output_tokens")),
        cost_usd=money(usage.get("total_cost")),
    )


def sum_usage(usages: Any) -> SourceUsage:
    """The figures of several models' usages added (None where none has one)."""
    parts = [inspect_usage(u) for u in usages]

    def total(name: str) -> Any:
        found = [getattr(u, name) for u in parts if getattr(u, name) is not None]
        return sum(found) if found else None

    return SourceUsage(prompt_tokens=total("prompt_tokens"), cached_tokens=total("cached_tokens"),
                       completion_tokens=total("completion_tokens"), cost_usd=total("cost_usd"))


def reasoning_of(content: Any) -> str | None:
    if isinstance(content, list):
        parts = [p.get("reasoning") for p in content if isinstance(p, dict) and p.get("type") == "reasoning"]
        return "\n".join(p for p in parts if isinstance(p, str)) or None
    return None


def visible(content: Any) -> str | None:
    if isinstance(content, list):
        content = [p for p in content if not (isinstance(p, dict) and p.get("type") == "reasoning")]
    return text_of(content)


def chat_message(raw: dict[str, Any]) -> Message:
    calls = tuple(
        ToolCall(
            id=str(c.get("id") or f"call_{i}"),
            name=str(c.get("function") or ""),
            arguments=arguments_text(c.get("arguments")),
        )
        for i, c in enumerate(raw.get("tool_calls") or ())
        if isinstance(c, dict)
    )
    role: Any = raw.get("role") if raw.get("role") in ROLES else "user"
    return Message(
        role=role,
        content=visible(raw.get("content")),
        tool_calls=calls,
        tool_call_id=raw.get("tool_call_id") if role == "tool" else None,
        name=raw.get("function") if role == "tool" and isinstance(raw.get("function"), str) else None,
    )


def same(a: Message, b: Message) -> bool:
    if a.role == "tool" or b.role == "tool":
        return a.role == b.role and a.tool_call_id == b.tool_call_id
    return (
        a.role == b.role
        and (a.content or "") == (b.content or "")
        and [c.id for c in a.tool_calls] == [c.id for c in b.tool_calls]
    )


def model_inputs(event: dict[str, Any], pool: list[Any]) -> list[dict[str, Any]]:
    inputs = [m for m in event.get("input") or () if isinstance(m, dict)]
    for start, end in event.get("input_refs") or ():
        inputs += [m for m in pool[int(start) : int(end)] if isinstance(m, dict)]
    return inputs


def sample_trajectory(sample: dict[str, Any], header: dict[str, Any], version: int, name: str) -> SourceTrajectory:
    attachments = obj(sample.get("attachments"))
    pool = resolve(sample.get("message_pool") or [], attachments)
    out: list[SourceMessage] = []
    conversation: list[Message] = []
    number = 0
    for event in sample.get("events") or ():
        if not isinstance(event, dict):
            continue
        if event.get("event") == "model":
            event = resolve(event, attachments)
            inputs = [chat_message(m) for m in model_inputs(event, pool)]
            k = 0
            while k < min(len(inputs), len(conversation)) and same(inputs[k], conversation[k]):
                k += 1
            if k < len(conversation):
                number, conversation, k = number + 1, [], 0
            for m in inputs[k:]:
                out.append(
                    plain(
                        m.role,
                        m.content,
                        conversation=number,
                        tool_calls=m.tool_calls,
                        tool_call_id=m.tool_call_id,
                        name=m.name,
                    )
                )
                conversation.append(m)
            output = obj(event.get("output"))
            choices = output.get("choices") if isinstance(output.get("choices"), list) else []
            choice = choices[0] if choices and isinstance(choices[0], dict) else {}
            raw = obj(choice.get("message")) or {"role": "assistant", "content": ""}
            reply = chat_message(raw)
            out.append(
                call_message(
                    reply.content,
                    reply.tool_calls,
                    conversation=number,
                    model=output.get("model") or event.get("model"),
                    usage=inspect_usage(output.get("usage")),
                    finish_reason=choice.get("stop_reason"),
                    reasoning=reasoning_of(raw.get("content")),
                    at=epoch_seconds(event.get("timestamp")),
                    duration_s=event.get("working_time")
                    if isinstance(event.get("working_time"), (int, float))
                    else None,
                )
            )
            conversation.append(reply)
        elif event.get("event") == "tool":
            event = resolve(event, attachments)
            error = event.get("error") if isinstance(event.get("error"), dict) else None
            message = Message(
                role="tool",
                content=text_of(event.get("result")),
                tool_call_id=str(event.get("id") or "") or None,
                name=str(event.get("function") or "") or None,
            )
            out.append(
                SourceMessage(
                    message=message,
                    conversation=number,
                    observation=SourceObservation(
                        tool_name=str(event.get("function") or "tool"),
                        tool_call_id=message.tool_call_id,
                        action=arguments_text(event.get("arguments")),
                        at=epoch_seconds(event.get("timestamp")),
                        duration_s=event.get("working_time")
                        if isinstance(event.get("working_time"), (int, float))
                        else None,
                        error=text_of(error.get("message")) if error else None,
                    ),
                )
            )
            conversation.append(message)
    given = resolve(sample.get("input"), attachments)
    task = (
        text_of(given)
        if isinstance(given, str)
        else next(
            (visible(m.get("content")) for m in given or () if isinstance(m, dict) and m.get("role") == "user"), ""
        )
    )
    spec = obj(header.get("eval"))
    return SourceTrajectory(
        format=FORMAT,
        version=str(version),
        source_id=f"{spec.get('task')}/{sample.get('id')}/epoch {sample.get('epoch')}",
        task=task or "",
        model=spec.get("model"),
        messages=tuple(out),
        run_usage=sum_usage(obj(sample.get("model_usage")).values()) if obj(sample.get("model_usage")) else None,
        started_at=epoch_seconds(sample.get("started_at")) or epoch_seconds(obj(header.get("stats")).get("started_at")),
        ended_at=epoch_seconds(sample.get("completed_at"))
        or epoch_seconds(obj(header.get("stats")).get("completed_at")),
        info={
            "scores": resolve(sample.get("scores"), attachments),
            "model_usage": sample.get("model_usage"),
            "target": resolve(sample.get("target"), attachments),
            "eval_id": spec.get("eval_id"),
            "status": header.get("status"),
        },
    )


def parse(data: bytes, name: str, limits: ReadLimits | None = None) -> list[SourceTrajectory]:
    if not looks_like(data):
        raise FormatMismatch(f"{name}: not an Inspect .eval log (not a zip archive)", path=name)
    archive = SafeZip(data, name, limits or ReadLimits())
    if "header.json" not in archive.names():
        first = "_journal/start.json" if "_journal/start.json" in archive.names() else None
        if first is None:
            raise UnreadableSource(f"{name}: no header.json in the archive: not an Inspect log", path=name)
    header = archive.json("header.json" if "header.json" in archive.names() else "_journal/start.json")
    if not isinstance(header, dict):
        raise UnreadableSource(f"{name}: header.json is not an object", path=name)
    version = header.get("version")
    if version not in VERSIONS:
        raise UnsupportedVersion(
            f"{name}: Inspect log version {version!r}; this Escrow reads {', '.join(map(str, VERSIONS))}",
            path=name,
            version=version,
        )
    samples = sorted(n for n in archive.names() if n.startswith("samples/") and n.endswith(".json"))
    out = []
    for member in samples:
        sample = archive.json(member)
        if not isinstance(sample, dict):
            raise UnreadableSource(f"{name}:{member} is not a sample object", path=name, member=member)
        out.append(sample_trajectory(sample, header, version, f"{name}:{member}"))
    return out
