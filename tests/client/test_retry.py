"""Retry arithmetic and the circuit breaker, with a fake clock and random."""

from __future__ import annotations

import email.utils

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.adapters.model_client.retry import (
    CircuitBreaker,
    RetryPolicy,
    jittered_backoff,
    parse_retry_after,
    retry_decision,
)

POLICY = RetryPolicy(max_attempts=5, base_s=0.5, cap_s=4.0, max_retry_after_s=10)


@given(st.integers(1, 20), st.floats(0, 1, exclude_max=True))
def test_full_jitter_stays_under_the_capped_exponential(n, r):
    delay = jittered_backoff(POLICY, n, lambda: r)
    assert 0 <= delay <= min(4.0, 0.5 * 2 ** (n - 1))


def test_decide_retries_with_jitter():
    d = retry_decision(POLICY, attempts_made=2, retryable=True, retry_after_s=None, remaining_s=100, rand=lambda: 0.5)
    assert d.retry and d.delay_s == 0.5


def test_retry_after_is_a_floor():
    d = retry_decision(POLICY, attempts_made=1, retryable=True, retry_after_s=3, remaining_s=100, rand=lambda: 0.1)
    assert d.retry and d.delay_s == 3


@pytest.mark.parametrize("kwargs,reason", [
    (dict(retryable=False), "never retried"),
    (dict(attempts_made=5), "5 attempts made"),
    (dict(retry_after_s=11), "exceeds 10s"),
    (dict(remaining_s=0.1, retry_after_s=1), "would pass the deadline"),
])
def test_decide_refuses(kwargs, reason):
    args = dict(attempts_made=1, retryable=True, retry_after_s=None, remaining_s=100, rand=lambda: 0.5) | kwargs
    d = retry_decision(POLICY, **args)
    assert not d.retry and reason in d.reason


def test_parse_retry_after():
    assert parse_retry_after("2") == 2 and parse_retry_after("0.5") == 0.5 and parse_retry_after("-3") == 0
    now = 1_800_000_000.0
    assert parse_retry_after(email.utils.formatdate(now + 7, usegmt=True), now_epoch=now) == pytest.approx(7)
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None


def test_breaker_opens_fails_fast_and_half_opens():
    now = [0.0]
    breaker = CircuitBreaker(threshold=3, reset_s=10, clock=lambda: now[0])
    for _ in range(2):
        breaker.record(True)
    assert breaker.state == "closed" and breaker.allow()
    breaker.record(True)
    assert breaker.state == "open" and not breaker.allow()
    now[0] = 10
    assert breaker.state == "half-open" and breaker.allow()
    breaker.record(True)  # the trial failed: open again, from now
    assert breaker.state == "open"
    now[0] = 20
    breaker.record(False)
    assert breaker.state == "closed" and breaker.failures == 0
