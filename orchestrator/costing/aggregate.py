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
from orchestrator.costing.run_cost import unpriced_warnings
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
    """The sum of the cached counts the group's calls reported; None (absent)
    when none did."""
    cached_calls: int = 0
    """How many of ``calls`` reported a cached count."""
    hit_cached_tokens: int = 0
    hit_prompt_tokens: int = 0
    """The cached and prompt tokens of the group's runs whose every call
    reported a cached count (``RunSlice.cached_known``): what the hit rate
    is over. A run whose calls partly reported one does not say which of
    its prompt tokens they cover, and a call that sent none is absent, not 0."""
    prefilled_tokens: int | None
    """Known only when every call of the group reported a cached count."""
    completion_tokens: int
    cost: CostBreakdown
    priced_runs: int = 0
    """Runs with dollars: Escrow's own (priced by the table), or imported
    ones repriced or whose source recorded dollars. None of them: the
    group's dollars are absent, not $0."""
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
        return ratio(self.hit_cached_tokens, self.hit_prompt_tokens) if self.hit_prompt_tokens else None

    @property
    def cost_usd(self) -> float | None:
        return self.cost.total_usd if self.priced_runs else None


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
           ttfts: Sequence[tuple[float, int]], reprice: bool = False) -> GroupStats:
    """A group's figures from its pieces and their cost parts. Every float is
    summed in the pieces' order from zero, so the figures do not depend on
    how the pieces were grouped or read; the sums run over columns (a fleet
    report has tens of thousands of pieces)."""
    run_cost: dict[str, float] = defaultdict(float)
    run_tokens: dict[str, int] = defaultdict(int)
    with_dollars = {p.run_id for p in pieces if has_dollars(p, reprice)}
    for p, (a, b, c, d, e) in zip(pieces, costs, strict=True):
        if p.run_id in with_dollars:
            run_cost[p.run_id] += a + b + c + d + e
        run_tokens[p.run_id] += p.prompt_tokens + p.completion_tokens
    # Tool time belongs to a run, not to one of its models: counted once a run.
    tool_s = dict(zip(map(attrgetter("run_id"), pieces), map(attrgetter("tool_s"), pieces), strict=True))
    sums = [sum(part) for part in zip(*costs, strict=True)] or [0.0] * 5
    input_usd, cached_usd, output_usd, gpu_usd, source_usd = sums
    prompt = sum(map(attrgetter("prompt_tokens"), pieces))
    reported = [p for p in pieces if p.cached_tokens is not None]
    cached = sum(p.cached_tokens or 0 for p in reported) if reported else None  # none reported: absent, not 0
    known = [p for p in pieces if p.cached_known]
    return GroupStats(
        key=key, runs=len({p.run_id for p in pieces}), calls=sum(map(attrgetter("calls"), pieces)),
        prompt_tokens=prompt, cached_tokens=cached,
        cached_calls=sum(p.calls if p.cached_reported is None else p.cached_reported for p in reported),
        hit_cached_tokens=sum(p.cached_tokens or 0 for p in known),
        hit_prompt_tokens=sum(p.prompt_tokens for p in known),
        # Prefilled is prompt - cached only where every call said its cached count.
        prefilled_tokens=None if cached is None or len(known) < len(pieces) else prompt - cached,
        priced_runs=len(with_dollars),
        completion_tokens=sum(map(attrgetter("completion_tokens"), pieces)),
        cost=CostBreakdown(input_usd=input_usd, cached_input_usd=cached_usd, output_usd=output_usd,
                           gpu_usd=gpu_usd, source_usd=source_usd),
        gpu_s=sum(map(attrgetter("gpu_s"), pieces)), decode_s=sum(map(attrgetter("decode_s"), pieces)),
        tool_s=sum(tool_s.values()), retries=sum(map(attrgetter("retries"), pieces)),
        wait_s=sum(map(attrgetter("wait_s"), pieces)), cost_per_run=Spread.of(list(run_cost.values())),
        tokens_per_run=Spread.of(list(run_tokens.values())), ttft_s=Spread.of_counts(ttfts),
    )


def has_dollars(p: RunSlice, reprice: bool) -> bool:
    """Whether a piece has dollars: priced by the table, or its source's own."""
    return priced(p, reprice) or p.source_usd is not None


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
        groups=tuple(_stats(k, [pieces[i] for i in grouped[k]], [costs[i] for i in grouped[k]], ttft_groups[k],
                            reprice) for k in sorted(grouped)),
        total=_stats("TOTAL", pieces, costs, all_ttfts, reprice) if pieces else None,
        warnings=tuple(unpriced_warnings({p.model for p in pieces if priced(p, reprice)}, prices)),
        include_replays=include_replays,
    )
