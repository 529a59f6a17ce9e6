"""Aggregate cost reports over many runs, grouped by model, day, status or
verdict, with p50 and p95 of the per-run and per-call figures. Pure: the
store hands in one ``RunSlice`` per (run, model) and a histogram of the
calls' TTFTs per group (so a million calls are not shipped one by one)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter

from orchestrator.contract import Frozen
from orchestrator.costing.figures import (
    ESCROW_SOURCE,
    GROUP_BY,
    PriceLookup,
    RunSlice,
    keyer,
    percentile,
    percentile_of_counts,
    ratio,
)
from orchestrator.costing.trajectory import unpriced_warnings
from policies.pricing import CostBreakdown, Price, cost_parts


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
    cached_tokens: int | None
    """None (absent) when no call of the group reported a cached count; with
    some that did, the sum of theirs."""
    prefilled_tokens: int | None
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
        return None if self.cached_tokens is None else ratio(self.cached_tokens, self.prompt_tokens)


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


CostParts = tuple[float, float, float, float, float]
"""(input, cached input, output, GPU, the source's own) dollars."""


def _stats(key: str, pieces: Sequence[RunSlice], costs: Sequence[CostParts],
           ttfts: Sequence[tuple[float, int]]) -> GroupStats:
    """A group's figures from its pieces and their cost parts. Every float is
    summed in the pieces' order from zero, so the figures do not depend on
    how the pieces were grouped or read; the sums run over columns (a fleet
    report has tens of thousands of pieces)."""
    run_cost: dict[str, float] = defaultdict(float)
    run_tokens: dict[str, int] = defaultdict(int)
    for p, (a, b, c, d, e) in zip(pieces, costs, strict=True):
        run_cost[p.run_id] += a + b + c + d + e
        run_tokens[p.run_id] += p.prompt_tokens + p.completion_tokens
    # Tool time belongs to a run, not to one of its models: counted once a run.
    tool_s = dict(zip(map(attrgetter("run_id"), pieces), map(attrgetter("tool_s"), pieces), strict=True))
    sums = [sum(part) for part in zip(*costs, strict=True)] or [0.0] * 5
    input_usd, cached_usd, output_usd, gpu_usd, source_usd = sums
    prompt = sum(map(attrgetter("prompt_tokens"), pieces))
    reported = [n for n in map(attrgetter("cached_tokens"), pieces) if n is not None]
    cached = sum(reported) if reported else None  # no piece's calls reported one: absent, not 0
    return GroupStats(
        key=key, runs=len(run_cost), calls=sum(map(attrgetter("calls"), pieces)), prompt_tokens=prompt,
        cached_tokens=cached, prefilled_tokens=None if cached is None else prompt - cached,
        completion_tokens=sum(map(attrgetter("completion_tokens"), pieces)),
        cost=CostBreakdown(input_usd=input_usd, cached_input_usd=cached_usd, output_usd=output_usd,
                           gpu_usd=gpu_usd, source_usd=source_usd),
        gpu_s=sum(map(attrgetter("gpu_s"), pieces)), decode_s=sum(map(attrgetter("decode_s"), pieces)),
        tool_s=sum(tool_s.values()), retries=sum(map(attrgetter("retries"), pieces)),
        wait_s=sum(map(attrgetter("wait_s"), pieces)), cost_per_run=Spread.of(list(run_cost.values())),
        tokens_per_run=Spread.of(list(run_tokens.values())), ttft_s=Spread.of_counts(ttfts),
    )


def priced(p: RunSlice, reprice: bool) -> bool:
    """Escrow's own runs are priced by the table; imported ones only ``reprice``-d."""
    return p.source == ESCROW_SOURCE or reprice


def _cost_of(prices: PriceLookup, reprice: bool = False) -> Callable[[RunSlice], CostParts]:
    """A piece's cost parts, each model's price looked up once; an imported
    run's are its source's own dollars unless ``reprice``."""
    price_of: dict[str, Price | None] = {}

    def cost(p: RunSlice) -> CostParts:
        if not priced(p, reprice):
            return 0.0, 0.0, 0.0, 0.0, p.source_usd or 0.0
        if p.model not in price_of:
            price_of[p.model] = prices(p.model)
        # No cached count reported: every prompt token is priced as input (none is known to be cached).
        return (*cost_parts(p.prompt_tokens, p.cached_tokens or 0, p.completion_tokens, p.gpu_s, price_of[p.model]),
                0.0)

    return cost


def group_stats(
    key: str, pieces: Sequence[RunSlice], ttfts: Sequence[tuple[float, int]], prices: PriceLookup
) -> GroupStats:
    return _stats(key, pieces, list(map(_cost_of(prices), pieces)), ttfts)


def aggregate(
    pieces: Iterable[RunSlice], ttfts: Iterable[tuple[str, float, int]], *, by: str, prices: PriceLookup,
    price_version: str, since: float | None = None, until: float | None = None, include_replays: bool = False,
    reprice: bool = False,
) -> AggregateReport:
    """``ttfts`` is a histogram of the answered calls' TTFTs: (group key,
    seconds, how many calls), the key as ``group_key`` makes it."""
    if by not in GROUP_BY:
        raise ValueError(f"cannot group by {by!r}; choose one of {', '.join(GROUP_BY)}")
    pieces = list(pieces)
    # Each piece priced once, for its group's sums and for the total's.
    key_of, costs = keyer(by), list(map(_cost_of(prices, reprice), pieces))
    grouped: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(pieces):
        grouped[key_of(p)].append(i)
    ttft_groups: dict[str, list[tuple[float, int]]] = defaultdict(list)
    all_ttfts: list[tuple[float, int]] = []
    for key, seconds, n in ttfts:
        ttft_groups[key].append((seconds, n))
        all_ttfts.append((seconds, n))
    return AggregateReport(
        by=by, since=since, until=until, price_version=price_version,
        groups=tuple(_stats(k, [pieces[i] for i in grouped[k]], [costs[i] for i in grouped[k]], ttft_groups[k])
                     for k in sorted(grouped)),
        total=_stats("TOTAL", pieces, costs, all_ttfts) if pieces else None,
        warnings=tuple(unpriced_warnings({p.model for p in pieces if priced(p, reprice)}, prices)),
        include_replays=include_replays,
    )
