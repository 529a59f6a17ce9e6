"""Prices and the cost of one call. Pure arithmetic.

Cached prompt tokens are a part of ``prompt_tokens``: they are charged at the
cached rate *instead of* the input rate, never in addition to it. Self-hosted
servers are priced by GPU time: $/hour times the call's GPU seconds
(``gpu_seconds``), which never include retry backoff. Every figure that shows
a call's or a run's dollars (the budget check, ``run --json``, ``runs``,
``show``, reports, the viewer, exports) is this one computation.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from orchestrator.contract import Frozen
from orchestrator.envelope import Envelope, Usage


class Price(Frozen):
    model: str
    input_per_mtok: float = Field(default=0.0, ge=0)
    cached_input_per_mtok: float | None = Field(default=None, ge=0)
    output_per_mtok: float = Field(default=0.0, ge=0)
    gpu_per_hour: float = Field(default=0.0, ge=0)

    @property
    def cached_rate(self) -> float:
        return self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok


def token_cost(usage: Usage, price: Price) -> float:
    return cost_breakdown(
        usage.prompt_tokens, usage.cached_prompt_tokens, usage.completion_tokens, 0.0, price
    ).total_usd


def gpu_cost(seconds: float, price: Price) -> float:
    return price.gpu_per_hour * seconds / 3600.0


def gpu_seconds(attempt_durations: Sequence[float], total_s: float) -> float:
    """The GPU seconds a call is charged for: the server's time, the summed
    durations of its HTTP attempts. The backoff slept between attempts is
    waiting, never GPU time; a call recorded without attempts counts its
    ``total_s`` (there was no backoff to leave out)."""
    return sum(attempt_durations) if attempt_durations else total_s


def envelope_gpu_seconds(envelope: Envelope) -> float:
    return gpu_seconds([a.duration_s for a in envelope.attempts], envelope.timings.total_s)


def call_cost(envelope: Envelope, price: Price | None) -> float:
    """Dollars for one call; an unpriced model costs 0 (local models work)."""
    usage = envelope.usage
    return cost_breakdown(
        usage.prompt_tokens, usage.cached_prompt_tokens, usage.completion_tokens, envelope_gpu_seconds(envelope), price
    ).total_usd


class CostBreakdown(Frozen):
    """Dollars of one call or a sum of calls, by what was paid for."""

    input_usd: float = 0.0
    cached_input_usd: float = 0.0
    output_usd: float = 0.0
    gpu_usd: float = 0.0
    source_usd: float = 0.0
    """An imported run's dollars as its source recorded them (not priced here)."""

    @property
    def total_usd(self) -> float:
        return self.input_usd + self.cached_input_usd + self.output_usd + self.gpu_usd + self.source_usd

    def __add__(self, other: "CostBreakdown") -> "CostBreakdown":
        return CostBreakdown(
            input_usd=self.input_usd + other.input_usd,
            cached_input_usd=self.cached_input_usd + other.cached_input_usd,
            output_usd=self.output_usd + other.output_usd,
            gpu_usd=self.gpu_usd + other.gpu_usd,
            source_usd=self.source_usd + other.source_usd,
        )


def cost_parts(
    prompt_tokens: int, cached_prompt_tokens: int, completion_tokens: int, gpu_seconds: float, price: Price | None
) -> tuple[float, float, float, float]:
    """The one cost computation: (input, cached input, output, GPU) dollars.
    Token counts may be sums over many calls: the cost is linear in them. The
    cached part is clamped to the prompt. Plain floats, so a report over
    many slices sums them without building a model per slice."""
    if price is None:
        return 0.0, 0.0, 0.0, 0.0
    cached = min(cached_prompt_tokens, prompt_tokens)
    return (
        (prompt_tokens - cached) * price.input_per_mtok / 1e6,
        cached * price.cached_rate / 1e6,
        completion_tokens * price.output_per_mtok / 1e6,
        gpu_cost(gpu_seconds, price),
    )


def cost_breakdown(
    prompt_tokens: int, cached_prompt_tokens: int, completion_tokens: int, gpu_seconds: float, price: Price | None
) -> CostBreakdown:
    """``cost_parts`` split by kind; ``token_cost`` and ``call_cost`` are sums of it."""
    input_usd, cached_usd, output_usd, gpu_usd = cost_parts(
        prompt_tokens, cached_prompt_tokens, completion_tokens, gpu_seconds, price)
    return CostBreakdown(input_usd=input_usd, cached_input_usd=cached_usd, output_usd=output_usd, gpu_usd=gpu_usd)
