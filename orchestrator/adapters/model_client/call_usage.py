"""Usage figures for an envelope: the server's where it gave them, otherwise
an estimate marked as such.

Cached prompt tokens are a *part of* the prompt tokens. OpenAI, vLLM and
SGLang report them as ``usage.prompt_tokens_details.cached_tokens``.
llama.cpp's server reports its own ``timings`` block (``prompt_n`` computed,
``cache_n`` reused) and, depending on version, a ``prompt_tokens`` that may
leave the cached part out; taking ``max(prompt_tokens, prompt_n + cache_n)``
gives the whole prompt either way without counting the cache twice. Some
llama.cpp versions send ``timings`` and no ``usage``: the whole prompt is then
``prompt_n + cache_n`` and the completion ``predicted_n``, all the server's
own figures (``server_block`` says which block they came from). The cached
count never exceeds the prompt: a server's larger figure is clamped to it and
kept as ``cached_prompt_tokens_reported``, which marks the clamp. llama-cpp-python sends no usage at all while
streaming: the figures are then estimated and marked so.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.adapters.model_client.accumulate import ResponseAccumulator
from orchestrator.adapters.model_client.wire import WireUsage
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
    parts = [payload.reasoning or "", payload.text, payload.refusal or ""]
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
    completion = wire.completion_tokens if wire is not None else None
    cached = None
    if wire is not None and wire.prompt_tokens_details is not None:
        cached = wire.prompt_tokens_details.cached_tokens
    blocks = ["usage"] if wire is not None and (prompt is not None or completion is not None) else []
    if timings is not None and (timings.prompt_n is not None or timings.predicted_n is not None):
        blocks.append("timings")
        if cached is None and timings.cache_n is not None:
            cached = timings.cache_n
        if timings.prompt_n is not None:
            whole = timings.prompt_n + (timings.cache_n or 0)
            prompt = whole if prompt is None else max(prompt, whole)
        if completion is None and timings.predicted_n is not None:
            completion = timings.predicted_n
    if blocks:
        fields["server_block"] = "+".join(blocks)
    if prompt is not None:
        fields.update(prompt_tokens=prompt, prompt_source="server")
    if completion is not None:
        fields.update(completion_source="server", **_reasoning(wire, prompt, completion))
    if estimate is not None:
        try:
            if "prompt_tokens" not in fields:
                fields.update(prompt_tokens=estimate_prompt_tokens(request, estimate), prompt_source="estimated")
            if "completion_tokens" not in fields:
                fields.update(
                    completion_tokens=estimate_completion_tokens(payload, estimate), completion_source="estimated"
                )
        except Exception:  # a broken estimator leaves the figures "absent"; it must never fail the call
            pass
    if cached is not None:
        # A part of the prompt, never more: an estimated prompt below the
        # server's cached count is raised to it rather than the other way round.
        if fields.get("prompt_source") == "estimated" and fields["prompt_tokens"] < cached:
            fields["prompt_tokens"] = cached
        kept = min(cached, fields.get("prompt_tokens", cached))
        fields.update(cached_prompt_tokens=kept, cached_source="server")
        if kept < cached:  # the server's figure is kept beside the clamped one, which it marks
            fields["cached_prompt_tokens_reported"] = cached
    return Usage(**fields)


def _reasoning(wire: WireUsage | None, prompt: int | None, completion: int) -> dict:
    """Completion tokens with reasoning included, and the convention the
    server used (quirk ``reasoning_tokens_excluded``)."""
    details = wire.completion_tokens_details if wire is not None else None
    reasoning = details.reasoning_tokens if details is not None else None
    if reasoning is None:
        return {"completion_tokens": completion}
    total = wire.total_tokens if wire is not None else None
    if total is not None and prompt is not None and reasoning and total == prompt + completion + reasoning:
        convention, completion = "excluded", completion + reasoning
    elif total is not None and prompt is not None and total == prompt + completion:
        convention = "included"
    else:
        convention = "assumed_included"
    return {"completion_tokens": completion, "reasoning_tokens": reasoning, "reasoning_convention": convention}
