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
from orchestrator.context.counting import MessageCounter
from orchestrator.context.tokenizer import FunctionCounter, TiktokenCounter
from orchestrator.contract import ModelRequest
from orchestrator.envelope import Payload, Usage

TokenEstimator = Callable[[str], int]


def default_estimator() -> TokenEstimator:
    """Offline cl100k_base, loaded on first use."""
    return TiktokenCounter("cl100k_base").count


def estimate_prompt_tokens(request: ModelRequest, estimate: TokenEstimator) -> int:
    """The same per-message arithmetic the context budget uses (template
    allowance included), through the caller's estimator."""
    counter = MessageCounter(FunctionCounter(estimate))
    return (counter.request_overhead() + counter.tools(request.tools)
            + sum(counter.message(m) for m in request.messages))


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
