"""Turns a scenario into bytes. Pure: no I/O, no clock."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.fault_server.scenario import Reply

# Plan steps: ("chunk", bytes) is one paced payload event; the rest are faults.
Step = tuple[str, Any]


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def sse(data: str) -> bytes:
    return f"data: {data}\n\n".encode("utf-8")


def prompt_words(body: dict[str, Any]) -> int:
    words = 0
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            words += len(content.split())
    return words


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def usage_for(reply: Reply, body: dict[str, Any], completion_tokens: int) -> dict[str, Any] | None:
    if reply.usage == "none":
        return None
    if isinstance(reply.usage, dict):
        return dict(reply.usage)
    prompt = prompt_words(body)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    }
    if reply.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    return usage


def _envelope(reply: Reply, body: dict[str, Any], index: int, obj: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-fault-{index}",
        "object": obj,
        "created": 0,
        "model": reply.model or body.get("model") or "fault-model",
        "system_fingerprint": reply.system_fingerprint,
    }


def _logprobs(piece: str, k: int) -> dict[str, Any]:
    """One entry per chunk, with ``k`` alternatives (the token itself first)."""
    top = [
        {"token": piece if i == 0 else f"{piece}~{i}", "logprob": -0.25 - i, "bytes": list(piece.encode())}
        for i in range(k)
    ]
    return {"content": [{"token": piece, "logprob": -0.25, "bytes": list(piece.encode()), "top_logprobs": top}]}


def stream_plan(reply: Reply, body: dict[str, Any], index: int) -> list[Step]:
    """The SSE events of a streamed reply, with its faults spliced in."""
    head = _envelope(reply, body, index, "chat.completion.chunk")
    want_logprobs = bool(body.get("logprobs"))
    requested_top = body.get("top_logprobs")
    top_k = requested_top if isinstance(requested_top, int) else 0

    def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> bytes:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if logprobs is not None:
            choice["logprobs"] = logprobs
        return sse(_dumps({**head, "choices": [choice]}))

    payload: list[bytes] = [
        chunk({"reasoning_content": piece}) for piece in _pieces(reply.reasoning, reply.chunk_chars)
    ]
    for n, piece in enumerate(_pieces(reply.text, reply.chunk_chars)):
        delta = {"role": "assistant", "content": piece} if n == 0 else {"content": piece}
        payload.append(chunk(delta, logprobs=_logprobs(piece, top_k) if want_logprobs else None))
    if reply.refusal:
        payload.append(chunk({"role": "assistant", "refusal": reply.refusal}))
    for i, call in enumerate(reply.tool_calls):
        opener = {"index": i, "id": call.id or f"call_{index}_{i}", "type": "function",
                  "function": {"name": call.name, "arguments": ""}}
        payload.append(chunk({"tool_calls": [opener]}))
        for piece in _pieces(call.arguments, reply.chunk_chars):
            payload.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))

    steps: list[Step] = []
    faults = sorted(reply.faults, key=lambda f: f.at_chunk)
    for n in range(len(payload) + 1):
        for fault in faults:
            if fault.at_chunk == n:
                steps.append(_fault_step(fault, head))
        if n < len(payload):
            steps.append(("chunk", payload[n]))
    steps.append(("chunk", chunk({}, reply.effective_finish_reason)))
    options = body.get("stream_options") or {}
    usage = usage_for(reply, body, len(payload))
    if usage is not None and isinstance(options, dict) and options.get("include_usage"):
        steps.append(("send", sse(_dumps({**head, "choices": [], "usage": usage}))))
    if reply.send_done:
        steps.append(("send", sse("[DONE]")))
    return steps


def _fault_step(fault, head: dict[str, Any]) -> Step:
    if fault.action == "stall":
        return ("stall", fault.seconds)
    if fault.action == "disconnect":
        return ("disconnect", None)
    if fault.action == "malformed":
        return ("send", b'data: {"choices": [{"index": 0, "delta": {"content": "unterminated\n\n')
    if fault.action == "error":
        error = {"message": fault.message, "type": "server_error", "code": 500}
        return ("send", sse(_dumps({**head, "choices": [], "error": error})))
    return ("send", fault.data)


def whole_body(reply: Reply, body: dict[str, Any], index: int) -> tuple[bytes, int]:
    """A non-streamed response body and the number of "tokens" it stands for."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.refusal:
        message["refusal"] = reply.refusal
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id or f"call_{index}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for i, c in enumerate(reply.tool_calls)
        ]
    tokens = len(_pieces(reply.text, reply.chunk_chars)) + sum(
        1 + len(_pieces(c.arguments, reply.chunk_chars)) for c in reply.tool_calls
    )
    out = {
        **_envelope(reply, body, index, "chat.completion"),
        "choices": [{"index": 0, "message": message, "finish_reason": reply.effective_finish_reason}],
    }
    usage = usage_for(reply, body, tokens)
    if usage is not None:
        out["usage"] = usage
    return _dumps(out).encode("utf-8"), tokens
