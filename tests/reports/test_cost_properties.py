"""Cost arithmetic against an independent computation in exact rationals, over
random usage rows and random trajectories; cached tokens are never counted twice."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.costing import CallFigures, run_cost
from orchestrator.envelope import Envelope, Status, Timings, Usage
from policies.pricing import Price, call_cost, cost_breakdown, gpu_cost, token_cost

rates = st.one_of(st.just(0.0), st.floats(min_value=0, max_value=100, allow_nan=False, allow_infinity=False))
prices = st.builds(
    Price, model=st.just("m"), input_per_mtok=rates, cached_input_per_mtok=st.one_of(st.none(), rates),
    output_per_mtok=rates, gpu_per_hour=rates,
)


@st.composite
def usage_rows(draw: st.DrawFn) -> tuple[int, int, int, float]:
    prompt = draw(st.integers(0, 2_000_000))
    # Mostly a part of the prompt; sometimes a server over-reports it.
    cached = draw(st.one_of(st.integers(0, prompt), st.integers(0, 3_000_000)))
    return prompt, cached, draw(st.integers(0, 100_000)), draw(st.floats(0, 10_000, allow_nan=False))


def exact_dollars(prompt: int, cached: int, completion: int, seconds: float, p: Price) -> Fraction:
    """Written from the pricing rule, not from the code: the cached part of the
    prompt (at most all of it) at the cached rate, the rest at the input rate."""
    cached_part = cached if cached <= prompt else prompt
    fresh_part = prompt - cached_part
    cached_rate = Fraction(p.input_per_mtok if p.cached_input_per_mtok is None else p.cached_input_per_mtok)
    tokens = (
        fresh_part * Fraction(p.input_per_mtok) + cached_part * cached_rate + completion * Fraction(p.output_per_mtok)
    )
    return tokens / 1_000_000 + Fraction(p.gpu_per_hour) * Fraction(seconds) / 3600


def close(a: float, b: Fraction) -> bool:
    return abs(Fraction(a) - b) <= Fraction(1, 10**9) * max(1, abs(b))


@given(usage_rows(), prices)
def test_breakdown_matches_independent_computation(row: tuple[int, int, int, float], price: Price) -> None:
    prompt, cached, completion, seconds = row
    got = cost_breakdown(prompt, cached, completion, seconds, price)
    assert close(got.total_usd, exact_dollars(prompt, cached, completion, seconds, price))
    usage = Usage(prompt_tokens=prompt, cached_prompt_tokens=cached, completion_tokens=completion)
    assert close(
        token_cost(usage, price) + gpu_cost(seconds, price), exact_dollars(prompt, cached, completion, seconds, price)
    )
    envelope = Envelope(status=Status.COMPLETED, usage=usage, timings=Timings(total_s=seconds))
    assert close(call_cost(envelope, price), exact_dollars(prompt, cached, completion, seconds, price))


@given(usage_rows(), prices)
def test_cached_tokens_are_never_counted_twice(row: tuple[int, int, int, float], price: Price) -> None:
    prompt, cached, completion, _ = row
    # With the cached rate equal to the input rate, caching changes nothing:
    # a token counted both as input and as cached would raise the cost.
    same = price.model_copy(update={"cached_input_per_mtok": price.input_per_mtok})
    assert close(
        cost_breakdown(prompt, cached, completion, 0, same).total_usd, exact_dollars(prompt, 0, completion, 0, same)
    )
    # Charged tokens add up to the prompt, whatever the server reported as cached.
    only_input = Price(model="m", input_per_mtok=1.0, cached_input_per_mtok=1.0)
    assert close(cost_breakdown(prompt, cached, 0, 0, only_input).total_usd, Fraction(prompt, 1_000_000))
    # Free cached tokens: only the uncached part of the prompt is paid.
    free_cache = Price(model="m", input_per_mtok=1.0, cached_input_per_mtok=0.0)
    assert close(
        cost_breakdown(prompt, cached, 0, 0, free_cache).input_usd, Fraction(prompt - min(cached, prompt), 1_000_000)
    )


def test_cached_tokens_are_a_part_of_the_prompt_worked_example() -> None:
    price = Price(model="m", input_per_mtok=3.0, cached_input_per_mtok=0.3, output_per_mtok=15.0)
    got = cost_breakdown(1_000_000, 800_000, 10_000, 0, price)
    # 200k fresh at $3/M + 800k cached at $0.30/M + 10k out at $15/M; never 1M at $3 plus 800k at $0.30.
    assert (round(got.input_usd, 9), round(got.cached_input_usd, 9), round(got.output_usd, 9)) == (0.6, 0.24, 0.15)
    assert round(got.total_usd, 9) == 0.99


def test_unpriced_model_costs_nothing() -> None:
    assert cost_breakdown(1000, 10, 10, 3600, None).total_usd == 0.0
    assert call_cost(Envelope(status=Status.COMPLETED, usage=Usage(prompt_tokens=5)), None) == 0.0


calls = st.lists(
    st.builds(
        CallFigures, turn=st.integers(0, 5), model=st.sampled_from(["m", "free", "unpriced"]),
        status=st.sampled_from(["COMPLETED", "TRUNCATED", None]), prompt_tokens=st.integers(0, 50_000),
        cached_prompt_tokens=st.integers(0, 60_000), completion_tokens=st.integers(0, 4_000),
        total_s=st.floats(0, 60, allow_nan=False),
    ),
    max_size=12,
)


@settings(max_examples=60)
@given(calls, prices)
def test_run_total_is_the_sum_of_independently_priced_calls(figures: list[CallFigures], price: Price) -> None:
    table = {"m": price, "free": Price(model="free")}
    report = run_cost(run_id="r", model="m", status="finished", verdict=None, calls=figures, tools=[],
                      prices=table.get, price_version="t")
    expected = sum(
        (exact_dollars(c.prompt_tokens, c.cached_prompt_tokens, c.completion_tokens, c.total_s, table[c.model])
         for c in figures if c.model in table), Fraction(0),
    )
    assert close(report.total.cost.total_usd, expected)
    assert close(sum(line.cost.total_usd for line in report.turns), expected)
    assert report.total.prompt_tokens == sum(c.prompt_tokens for c in figures)
    assert report.total.cached_tokens == sum(min(c.cached_prompt_tokens, c.prompt_tokens) for c in figures)
    assert report.total.cached_tokens + report.total.prefilled_tokens == report.total.prompt_tokens
    assert ("unpriced" in {c.model for c in figures}) == any("unpriced" in w for w in report.warnings)
