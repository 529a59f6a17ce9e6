"""The cost report of one run: per turn and in total, and the prefix-cache
comparison of actual prefill against the no-cache and ideal-cache formulas.

Output sets latency (TTFT, decode), re-sent input sets cost: each call
re-sends the conversation so far. The part of a prompt already sent by the
previous call is counted as *re-sent*; the part the server served from its
prefix cache as *cached*; the rest was *prefilled* (computed afresh).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from orchestrator.context.accounting import prefill_tokens_ideal_cache, resent_tokens_no_cache
from orchestrator.contract import Frozen
from orchestrator.costing.figures import (
    ESCROW_SOURCE,
    TOKEN_FIGURES,
    CallFigures,
    PriceLookup,
    ToolFigures,
    ratio,
)
from orchestrator.grammar import ConstraintUse
from policies.pricing import CostBreakdown, cost_breakdown


class CostLine(Frozen):
    """One turn of a run (``turn`` set) or its total (``turn`` None)."""

    turn: int | None
    calls: int = 0
    statuses: tuple[str, ...] = ()
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefilled_tokens: int = 0
    completion_tokens: int = 0
    resent_tokens: int = 0
    cost: CostBreakdown = CostBreakdown()
    gpu_s: float = 0.0
    wait_s: float = 0.0
    ttft_s: float | None = None
    decode_s: float = 0.0
    tool_s: float = 0.0
    tool_calls: int = 0
    retries: int = 0
    absent: tuple[str, ...] = ()
    """Of ``TOKEN_FIGURES`` and ``cost_usd``, those no call of the line gives
    (a server that sends no count, an imported call without dollars): its
    rows show them absent, not 0."""

    @property
    def hit_ratio(self) -> float | None:
        """Prefix-cache hit ratio: cached / prompt tokens."""
        return ratio(self.cached_tokens, self.prompt_tokens)


class CacheComparison(Frozen):
    """Actual prompt and prefill tokens beside N*S0 + delta*N(N-1)/2 (every
    prompt prefilled in full) and S0 + (N-1)*delta (an ideal prefix cache)."""

    n: int
    s0: int
    delta: int
    delta_exact: float
    sent_tokens: int
    prefilled_tokens: int | None
    """Σ(prompt − cached); None when no answered call reported a cached count
    (a server that sends none): the prefill is then not known."""
    no_cache_tokens: int
    ideal_cache_tokens: int
    derivation: str

    @property
    def saving_vs_no_cache(self) -> float | None:
        """How many times fewer tokens were prefilled than with no cache."""
        return None if self.prefilled_tokens is None else ratio(self.no_cache_tokens, self.prefilled_tokens)

    @property
    def excess_over_ideal(self) -> float | None:
        """Prefilled tokens relative to an ideal cache (1.0 is ideal)."""
        return None if self.prefilled_tokens is None else ratio(self.prefilled_tokens, self.ideal_cache_tokens)


class RunCost(Frozen):
    run_id: str
    model: str
    status: str
    verdict: str | None
    price_version: str
    turns: tuple[CostLine, ...]
    total: CostLine
    comparison: CacheComparison | None
    warnings: tuple[str, ...] = ()
    engines: tuple[str, ...] = ()
    constraint: ConstraintUse | None = None
    """Constrained decoding: what was sent and how often it was not honoured."""
    last_alive_at: float | None = None
    """A crashed run's last heartbeat (its process is gone)."""
    sandbox_runtime: str | None = None
    """The OCI runtime its sandbox ran under (runc, runsc); None where the run
    did not record one (an imported run, or one recorded before runs did)."""
    source: str = ESCROW_SOURCE
    cost_basis: str = "price table"
    """Where the dollars come from: "price table" (Escrow's, an imported run
    only with --reprice), "source per call", "source run-level", or "absent"
    (an imported run whose source recorded none)."""
    run_level: CostLine | None = None
    """The source's run-level figures that no call gives, counted in ``total``."""
    run_level_figures: dict[str, float | int | None] | None = None
    """Those figures by name (None: the source does not give it at run level either)."""
    source_totals: dict[str, dict[str, float | int | None]] | None = None
    """The source's run-level totals beside the sum of its per-call figures
    ("run_level", "per_call"), where it has both and they differ."""
    clamps: tuple[CachedClamp, ...] = ()
    """Calls whose server reported more cached tokens than the prompt held."""


class CachedClamp(Frozen):
    """A call's cached count as the server reported it, and as counted."""

    turn: int | None
    reported: int
    counted: int


def resent_per_call(calls: Sequence[CallFigures]) -> list[int]:
    """Tokens of each prompt already sent by the previous answered call. With
    a prefix-stable layout, that is the whole previous prompt (or all of this
    one, when compaction made it shorter)."""
    out, previous = [], None
    for call in calls:
        out.append(0 if previous is None or not call.has_usage else min(call.prompt_tokens, previous))
        if call.has_usage:
            previous = call.prompt_tokens
    return out


def cache_comparison(calls: Sequence[CallFigures]) -> CacheComparison | None:
    answered = [c for c in calls if c.has_usage]
    if not answered:
        return None
    left_out = sum(1 for c in calls if c.status is not None and not c.has_usage)
    n, s0 = len(answered), answered[0].prompt_tokens
    exact = (answered[-1].prompt_tokens - s0) / (n - 1) if n > 1 else 0.0
    delta = max(0, round(exact))
    derivation = (
        f"N = {n} answered model calls with usage"
        f"{f' ({left_out} without usage left out: no prompt size was reported)' if left_out else ''}; "
        f"S0 = {s0}, the first call's prompt tokens; "
        f"delta = {delta}, the mean growth of the prompt per call ((last {answered[-1].prompt_tokens} - first {s0}) / "
        f"{max(n - 1, 1)}"
        f" = {exact:.1f}, rounded{', clamped at 0: the prompt shrank' if exact < 0 else ''})"
    )
    return CacheComparison(
        n=n, s0=s0, delta=delta, delta_exact=exact,
        sent_tokens=sum(c.prompt_tokens for c in answered),
        prefilled_tokens=None if all("cached_tokens" in c.absent for c in answered)
        else sum(c.prompt_tokens - c.cached for c in answered),
        no_cache_tokens=resent_tokens_no_cache(s0, delta, n),
        ideal_cache_tokens=prefill_tokens_ideal_cache(s0, delta, n),
        derivation=derivation,
    )


def call_cost(call: CallFigures, prices: PriceLookup, priced: bool) -> CostBreakdown:
    """A call's dollars: priced by the table, or (an imported run not
    repriced) the source's own, none where it gave none."""
    if not priced:
        return CostBreakdown(source_usd=call.source_usd or 0.0)
    return cost_breakdown(call.prompt_tokens, call.cached, call.completion_tokens, call.gpu_s, prices(call.model))


def cost_line(turn: int | None, calls: Sequence[CallFigures], resent: Sequence[int], tools: Sequence[ToolFigures],
              prices: PriceLookup, priced: bool = True) -> CostLine:
    cost = CostBreakdown()
    for call in calls:
        cost = cost + call_cost(call, prices, priced)
    ttfts = [c.ttft_s for c in calls if c.ttft_s is not None]
    prompt, cached = sum(c.prompt_tokens for c in calls), sum(c.cached for c in calls)
    absent = [name for name in TOKEN_FIGURES if calls and all(name in c.absent for c in calls)]
    if not priced and calls and all(c.source_usd is None for c in calls):
        absent.append("cost_usd")
    elif priced and calls and not any(c.has_usage for c in calls) and cost.total_usd == 0:
        # No call was answered with usage (an HTTP 500): nothing to price, not $0.
        absent.append("cost_usd")
    return CostLine(
        turn=turn, calls=len(calls), statuses=tuple(c.status or "IN_FLIGHT" for c in calls),
        prompt_tokens=prompt, cached_tokens=cached, prefilled_tokens=prompt - cached,
        completion_tokens=sum(c.completion_tokens for c in calls), resent_tokens=sum(resent), cost=cost,
        gpu_s=sum(c.gpu_s for c in calls), wait_s=sum(c.wait_s for c in calls),
        # A turn's latency to first token is its first call's; a total sums them.
        ttft_s=(ttfts[0] if turn is not None else sum(ttfts)) if ttfts else None,
        decode_s=sum(c.decode_s or 0.0 for c in calls), tool_s=sum(t.seconds for t in tools),
        tool_calls=sum(t.count for t in tools), retries=sum(c.retries for c in calls), absent=tuple(absent),
    )


def run_cost(
    *, run_id: str, model: str, status: str, verdict: str | None, calls: Sequence[CallFigures],
    tools: Sequence[ToolFigures], prices: PriceLookup, price_version: str, source: str = ESCROW_SOURCE,
    reprice: bool = False, run_level: CallFigures | None = None,
    reported: dict[str, float | int | None] | None = None,
) -> RunCost:
    """Per-turn lines (in turn order; calls outside a turn under None last), the total, the comparison.
    An imported run (``source`` not Escrow) costs what its source recorded,
    per call, plus ``run_level`` (its run-level figures no call gives),
    unless ``reprice``; ``reported`` is the source's run-level totals."""
    priced = source == ESCROW_SOURCE or reprice
    resent = resent_per_call(calls)
    by_turn: dict[int | None, list[int]] = defaultdict(list)
    for index, call in enumerate(calls):
        by_turn[call.turn].append(index)
    tools_by_turn: dict[int | None, list[ToolFigures]] = defaultdict(list)
    for tool in tools:
        tools_by_turn[tool.turn].append(tool)
    numbers = sorted({n for n in (*by_turn, *tools_by_turn) if n is not None})
    lines = [
        cost_line(n, [calls[i] for i in by_turn[n]], [resent[i] for i in by_turn[n]], tools_by_turn[n], prices,
                  priced)
        for n in numbers
    ]
    total = cost_line(None, calls, resent, tools, prices, priced)
    extra = None if run_level is None else cost_line(None, [run_level], [0], [], prices, priced)
    if extra is not None:
        total = total.model_copy(update={
            "prompt_tokens": total.prompt_tokens + extra.prompt_tokens,
            "cached_tokens": total.cached_tokens + extra.cached_tokens,
            "prefilled_tokens": total.prefilled_tokens + extra.prefilled_tokens,
            "completion_tokens": total.completion_tokens + extra.completion_tokens, "cost": total.cost + extra.cost,
            # Absent from the total only if the run-level figures lack it too.
            "absent": tuple(name for name in total.absent if name in extra.absent) if total.calls else extra.absent})
    models = {c.model for c in calls} | ({run_level.model} if run_level else set())
    basis = "price table" if priced else cost_basis(calls, run_level)
    warnings = unpriced_warnings(models, prices) if priced else []
    if basis == "absent":
        warnings.append("the source recorded no cost for this run: its dollars are absent "
                        "(--reprice prices its tokens with Escrow's price table)")
    return RunCost(
        run_id=run_id, model=model, status=status, verdict=verdict, price_version=price_version,
        turns=tuple(lines), total=total, comparison=cache_comparison(calls),
        warnings=tuple(warnings), source=source, cost_basis=basis, run_level=extra,
        run_level_figures=None if run_level is None else {
            "prompt_tokens": run_level.prompt_tokens if run_level.prompt_source != "absent" else None,
            "completion_tokens": run_level.completion_tokens if run_level.prompt_source != "absent" else None,
            "cost_usd": run_level.source_usd},
        source_totals=differing(calls, reported),
        clamps=tuple(CachedClamp(turn=c.turn, reported=c.cached_reported, counted=c.cached)
                     for c in calls if c.cached_reported is not None),
    )


def cost_basis(calls: Sequence[CallFigures], run_level: CallFigures | None) -> str:
    if any(c.source_usd is not None for c in calls):
        return "source per call"
    if run_level is not None and run_level.source_usd is not None:
        return "source run-level"
    return "absent"


def differing(calls: Sequence[CallFigures], reported: dict[str, float | int | None] | None,
              ) -> dict[str, dict[str, float | int | None]] | None:
    """The source's run-level totals and its per-call sums, where both give a figure and one differs."""
    if not reported:
        return None
    costs = [c.source_usd for c in calls if c.source_usd is not None]
    answered = [c for c in calls if c.has_usage]
    per_call: dict[str, float | int | None] = {
        "prompt_tokens": sum(c.prompt_tokens for c in answered) if answered else None,
        "cached_tokens": sum(c.cached for c in answered) if answered else None,
        "completion_tokens": sum(c.completion_tokens for c in answered) if answered else None,
        "cost_usd": round(sum(costs), 9) if costs else None,
    }
    both = [k for k, v in per_call.items() if v is not None and reported.get(k) is not None]
    if not any(abs(float(per_call[k] or 0) - float(reported[k] or 0)) > 1e-9 for k in both):
        return None
    return {"run_level": {k: reported.get(k) for k in per_call}, "per_call": per_call}


def unpriced_warnings(models: set[str], prices: PriceLookup) -> list[str]:
    return [
        f"no price for model {m!r}: counted as $0 (set one with `escrow price set {m} ...`)"
        for m in sorted(models) if prices(m) is None
    ]
