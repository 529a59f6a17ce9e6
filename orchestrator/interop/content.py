"""Turning the source formats' loose field values into plain typed ones."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from orchestrator.contract import ToolCall
from orchestrator.interop.errors import UnreadableSource
from orchestrator.interop.records import SourceUsage


def obj(value: Any) -> dict[str, Any]:
    """A JSON object field, or an empty one when the source has something else."""
    return value if isinstance(value, dict) else {}


def text_of(content: Any) -> str | None:
    """Message content as text: a string as it is; a list of parts joined,
    text parts by their text and any other part as its JSON (so an image
    reference is kept, not dropped)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str) and part.get("type", "text") == "text":
                pieces.append(part["text"])
            else:
                pieces.append(json.dumps(part, ensure_ascii=False, sort_keys=True))
        return "\n".join(pieces)
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def epoch_seconds(value: Any) -> float | None:
    """A timestamp (Unix seconds or ISO 8601) as Unix seconds; None if absent."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        # A time without a zone (OpenHands writes local time without one) is read as UTC, not as this machine's.
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp()
    return None


def count(value: Any) -> int | None:
    """A token count, or None when the source has none (never 0 for absent)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def money(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def arguments_text(value: Any) -> str:
    """Tool-call arguments as the raw text Escrow stores: a string verbatim,
    anything else as its JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value if value is not None else {}, ensure_ascii=False, sort_keys=True)


def need(value: Any, kind: type | tuple[type, ...], what: str, name: str) -> Any:
    """The field a format requires, of the type it requires, or a clear error."""
    if not isinstance(value, kind):
        raise UnreadableSource(f"{name}: {what} is missing or not a {getattr(kind, '__name__', kind)}", path=name)
    return value


def chat_completion_usage(usage: Any, cost_usd: float | None = None) -> SourceUsage:
    """An OpenAI/LiteLLM ``usage`` object: ``prompt_tokens`` already include
    the cached ones (``prompt_tokens_details.cached_tokens``, or Anthropic's
    ``cache_read_input_tokens`` as LiteLLM passes it through)."""
    if not isinstance(usage, dict):
        return SourceUsage(cost_usd=cost_usd)
    details = obj(usage.get("prompt_tokens_details"))
    cached = count(details.get("cached_tokens"))
    if cached is None:
        cached = count(usage.get("cache_read_input_tokens"))
    return SourceUsage(
        prompt_tokens=count(usage.get("prompt_tokens")),
        cached_tokens=cached,
        completion_tokens=count(usage.get("completion_tokens")),
        cost_usd=cost_usd,
    )


def chat_completion_tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    """OpenAI-shaped ``tool_calls`` (``id``, ``function.name``, ``function.arguments``)."""
    calls = []
    for i, item in enumerate(raw if isinstance(raw, list) else ()):
        if not isinstance(item, dict):
            continue
        function = obj(item.get("function"))
        calls.append(
            ToolCall(
                id=str(item.get("id") or f"call_{i}"),
                name=str(function.get("name") or ""),
                arguments=arguments_text(function.get("arguments")),
            )
        )
    return tuple(calls)
