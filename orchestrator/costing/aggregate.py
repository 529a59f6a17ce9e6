"""Aggregate cost reports over many runs, grouped by model, day, status or
verdict, with p50 and p95 of the per-run and per-call figures. Pure: the
store hands in one ``RunSlice`` per (run, model) and a histogram of the
calls' TTFTs per group (so a million calls are not shipped one by one)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Literal

from orchestrator.contract import Frozen
from orchestrator.costing.figures import (
    DAY_FORMAT,
    NO_BATCH,
    NO_ENGINE,
    NO_VERDICT,
    PriceLookup,
    RunSlice,
    percentile,
    percentile_of_counts,
    ratio,
)
from orchestrator.costing.trajectory import unpriced_warnings
from policies.pricing import CostBreakdown, cost_parts

GroupBy = Literal["model", "day", "status", "verdict", "engine", "source", "batch"]
GROUP_BY: tuple[str, ...] = ("model", "day", "status", "verdict", "engine", "source", "batch")
class Spread(Frozen):
    p50: float | None
    p95: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> "Spread":
        return cls(p50=percentile(values, 50), p95=percentile(values, 95))

    @classmethod
    def of_counts(cls, counts: Sequence[tuple[float, int]]) -> "Spread":
        return cls(p50=percentile_of_counts(counts, 50), p95=percentile_of_counts(counts, 95))


class GroupStats(Frozen):
    key: str
    runs: int
    calls: int
    prompt_tokens: int
    cached_tokens: int
    prefilled_tokens: int
    completion_tokens: int
    cost: CostBreakdown
    gpu_s: float
    decode_s: float
    tool_s: float
    retries: int
    wait_s: float
    cost_per_run: Spread
    tokens_per_run: Spread
    ttft_s: Spread

    @property
    def hit_ratio(self) -> float | None:
        return ratio(self.cached_tokens, self.prompt_tokens)


class AggregateReport(Frozen):
    by: str
    since: float | None
    until: float | None
    price_version: str
    groups: tuple[GroupStats, ...]
    total: GroupStats | None
    warnings: tuple[str, ...] = ()
    include_replays: bool = False
    """False: replays, re-executions and forks' shared prefixes are left out (no spend of their own)."""


def group_key(by: str, piece: RunSlice) -> str:
    if by == "model":
        return piece.model
    if by == "day":
        return datetime.fromtimestamp(piece.created_at, tz=timezone.utc).strftime(DAY_FORMAT)
    if by == "status":
        return piece.status
    if by == "verdict":
        return piece.verdict or NO_VERDICT
    if by == "engine":
        return piece.engine or NO_ENGINE
    if by == "source":
        return piece.source
    if by == "batch":
        return piece.batch or NO_BATCH
    raise ValueError(f"cannot group by {by!r}; choose one of {', '.join(GROUP_BY)}")


def group_stats(
    key: str, pieces: Sequence[RunSlice], ttfts: Sequence[tuple[float, int]], prices: PriceLookup
) -> GroupStats:
    per_run_cost: dict[str, float] = defaultdict(float)
    per_run_tokens: dict[str, int] = defaultdict(int)
    # Plain floats added in the pieces' order: the same sums as adding one
    # CostBreakdown a piece, without building two models a piece.
    input_usd = cached_usd = output_usd = gpu_usd = 0.0
    for p in pieces:
        a, b, c, d = cost_parts(p.prompt_tokens, p.cached_tokens, p.completion_tokens, p.gpu_s, prices(p.model))
        input_usd, cached_usd, output_usd, gpu_usd = input_usd + a, cached_usd + b, output_usd + c, gpu_usd + d
        per_run_cost[p.run_id] += a + b + c + d
        per_run_tokens[p.run_id] += p.prompt_tokens + p.completion_tokens
    cost = CostBreakdown(input_usd=input_usd, cached_input_usd=cached_usd, output_usd=output_usd, gpu_usd=gpu_usd)
    # Tool time belongs to a run, not to one of its models: count it once.
    tool_s = {p.run_id: p.tool_s for p in pieces}
    prompt, cached = sum(p.prompt_tokens for p in pieces), sum(p.cached_tokens for p in pieces)
    return GroupStats(
        key=key,
        runs=len(per_run_cost),
        calls=sum(p.calls for p in pieces),
        prompt_tokens=prompt,
        cached_tokens=cached,
        prefilled_tokens=prompt - cached,
        completion_tokens=sum(p.completion_tokens for p in pieces),
        cost=cost,
        gpu_s=sum(p.gpu_s for p in pieces),
        decode_s=sum(p.decode_s for p in pieces),
        tool_s=sum(tool_s.values()),
        retries=sum(p.retries for p in pieces),
        wait_s=sum(p.wait_s for p in pieces),
        cost_per_run=Spread.of(list(per_run_cost.values())),
        tokens_per_run=Spread.of(list(per_run_tokens.values())),
        ttft_s=Spread.of_counts(ttfts),
    )


def aggregate(
    pieces: Iterable[RunSlice], ttfts: Iterable[tuple[str, float, int]], *, by: str, prices: PriceLookup,
    price_version: str, since: float | None = None, until: float | None = None, include_replays: bool = False,
) -> AggregateReport:
    """``ttfts`` is a histogram of the answered calls' TTFTs: (group key,
    seconds, how many calls), the key as ``group_key`` makes it."""
    pieces = list(pieces)
    grouped: dict[str, list[RunSlice]] = defaultdict(list)
    for p in pieces:
        grouped[group_key(by, p)].append(p)
    ttft_groups: dict[str, list[tuple[float, int]]] = defaultdict(list)
    all_ttfts: list[tuple[float, int]] = []
    for key, seconds, n in ttfts:
        ttft_groups[key].append((seconds, n))
        all_ttfts.append((seconds, n))
    groups = tuple(group_stats(k, grouped[k], ttft_groups[k], prices) for k in sorted(grouped))
    return AggregateReport(
        by=by, since=since, until=until, price_version=price_version, groups=groups,
        total=group_stats("TOTAL", pieces, all_ttfts, prices) if pieces else None,
        warnings=tuple(unpriced_warnings({p.model for p in pieces}, prices)), include_replays=include_replays,
    )
