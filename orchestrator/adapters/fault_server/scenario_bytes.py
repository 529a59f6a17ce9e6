"""Turns a scenario into bytes. Pure: no I/O, no clock."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.adapters.fault_server.scenario import Reply

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
    prompt = prompt_words(body) if reply.prompt_token_ids is None else len(reply.prompt_token_ids)
    if reply.completion_token_ids is not None:
        completion_tokens = len(reply.completion_token_ids)
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


def _entry(piece: str, k: int, token_id: Any = None) -> dict[str, Any]:
    top = [
        {"token": piece if i == 0 else f"{piece}~{i}", "logprob": -0.25 - i, "bytes": list(piece.encode())}
        for i in range(k)
    ]
    entry = {"token": piece, "logprob": -0.25, "bytes": list(piece.encode()), "top_logprobs": top}
    return entry if token_id is None else {"id": token_id, **entry}


def _logprobs(piece: str, k: int, ids: list[Any] | None = None) -> dict[str, Any]:
    """One entry per chunk, with ``k`` alternatives (the token itself first);
    with ``ids`` (llama.cpp), one entry per id, each carrying its ``id``."""
    if ids is None:
        return {"content": [_entry(piece, k)]}
    return {"content": [_entry(piece if n == 0 else "", k, token_id) for n, token_id in enumerate(ids)]}


def _id_shares(reply: Reply, pieces: int) -> list[list[Any] | None]:
    """The completion ids each of ``pieces`` text chunks carries, plus one
    share for the finishing chunk: one id a chunk, the ids left over on the
    finishing chunk, and chunks past the last id with none."""
    ids = reply.completion_token_ids
    if ids is None:
        return [None] * (pieces + 1)
    shares: list[list[Any] | None] = [ids[n:n + 1] for n in range(pieces)]
    return [*shares, ids[pieces:]]


def stream_plan(reply: Reply, body: dict[str, Any], index: int) -> list[Step]:
    """The SSE events of a streamed reply, with its faults spliced in."""
    head = _envelope(reply, body, index, "chat.completion.chunk")
    want_logprobs = bool(body.get("logprobs"))
    requested_top = body.get("top_logprobs")
    top_k = requested_top if isinstance(requested_top, int) else 0

    vllm_ids = reply.token_ids_as == "vllm"
    texts = _pieces(reply.text, reply.chunk_chars)
    shares = _id_shares(reply, len(texts))
    first = [True]

    def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None, ids: Any = None) -> bytes:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if logprobs is not None:
            choice["logprobs"] = logprobs
        if ids is not None and vllm_ids:
            choice["token_ids"] = ids
        top = {}
        if first[0] and vllm_ids and reply.prompt_token_ids is not None:
            top = {"prompt_token_ids": reply.prompt_token_ids}  # vLLM: on the first chunk only
        first[0] = False
        return sse(_dumps({**head, **top, "choices": [choice]}))

    def entries(piece: str, share: list[Any] | None) -> Any:
        if not want_logprobs:
            return None
        return _logprobs(piece, top_k, None if vllm_ids else share)

    payload: list[bytes] = [
        chunk({"reasoning_content": piece}) for piece in _pieces(reply.reasoning, reply.chunk_chars)
    ]
    for n, piece in enumerate(texts):
        delta = {"role": "assistant", "content": piece} if n == 0 else {"content": piece}
        payload.append(chunk(delta, logprobs=entries(piece, shares[n]), ids=shares[n]))
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
    rest = shares[-1]
    steps.append(("chunk", chunk({}, reply.effective_finish_reason, ids=rest or None,
                                 logprobs=entries("", rest) if rest and not vllm_ids else None)))
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
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": reply.effective_finish_reason}
    ids = reply.completion_token_ids
    requested_top = body.get("top_logprobs")
    k = requested_top if isinstance(requested_top, int) else 0
    if ids is not None and reply.token_ids_as == "vllm":
        choice["token_ids"] = ids
    if ids is not None and reply.token_ids_as == "llama.cpp" and body.get("logprobs"):
        choice["logprobs"] = {"content": [_entry(reply.text if n == 0 else "", k, i) for n, i in enumerate(ids)]}
    elif body.get("logprobs"):
        choice["logprobs"] = {"content": [_entry(p, k) for p in _pieces(reply.text, reply.chunk_chars)]}
    top = {"prompt_token_ids": reply.prompt_token_ids} if reply.prompt_token_ids is not None and (
        reply.token_ids_as == "vllm") else {}
    out = {**_envelope(reply, body, index, "chat.completion"), **top, "choices": [choice]}
    usage = usage_for(reply, body, tokens)
    if usage is not None:
        out["usage"] = usage
    return _dumps(out).encode("utf-8"), tokens


def completion_body(reply: Reply, body: dict[str, Any], index: int) -> tuple[bytes, int]:
    """vLLM's ``/v1/completions`` answer (never streamed here): the text, and
    with ``return_token_ids`` each choice's sampled ``token_ids`` and the
    ``prompt_token_ids`` it read (the script's, else the prompt's ids as
    sent); with ``logprobs``, one ``token_logprobs`` entry per sampled id
    (per chunk of text without ids); with ``prompt_logprobs``, one entry per
    prompt id as vLLM gives a teacher scoring them."""
    ids = reply.completion_token_ids
    pieces = [reply.text if n == 0 else "" for n in range(len(ids))] if ids is not None else (
        _pieces(reply.text, reply.chunk_chars))
    choice: dict[str, Any] = {"index": 0, "text": reply.text, "logprobs": None,
                              "finish_reason": reply.effective_finish_reason, "stop_reason": None}
    if isinstance(body.get("logprobs"), int):
        k = body["logprobs"]
        choice["logprobs"] = {
            "text_offset": [0] * len(pieces), "tokens": pieces, "token_logprobs": [-0.25] * len(pieces),
            "top_logprobs": [{p if i == 0 else f"{p}~{i}": -0.25 - i for i in range(k)} for p in pieces]}
    prompt = body.get("prompt")
    sent = prompt if isinstance(prompt, list) and all(isinstance(i, int) for i in prompt) else None
    if sent is not None and isinstance(body.get("prompt_logprobs"), int):
        # vLLM's shape: null for the first id, then each id's own entry (here always the top one).
        choice["prompt_logprobs"] = [None, *({str(i): {"logprob": -1.25, "rank": 1, "decoded_token": f"t{i}"}}
                                             for i in sent[1:])]
    if body.get("return_token_ids"):
        choice["token_ids"] = ids
        choice["prompt_token_ids"] = reply.prompt_token_ids if reply.prompt_token_ids is not None else sent
    out = {**_envelope(reply, body, index, "text_completion"), "choices": [choice]}
    usage = usage_for(reply, {"messages": []}, len(pieces))
    if usage is not None and sent is not None and reply.prompt_token_ids is None and reply.usage == "auto":
        usage = {**usage, "prompt_tokens": len(sent), "total_tokens": len(sent) + usage["completion_tokens"]}
    if usage is not None:
        out["usage"] = usage
    return _dumps(out).encode("utf-8"), len(pieces)
