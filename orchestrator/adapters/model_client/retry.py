"""Retry arithmetic for TRANSPORT_FAILURE, and a circuit breaker. Pure: the
clock and the random source are passed in, so every decision is testable.

Backoff is "full jitter": the wait before retry n is uniform in
[0, min(cap, base * 2**(n-1))], which spreads a crowd of clients that failed
together. A server's Retry-After is a floor on that wait. No wait may run past
the call's deadline: T_max bounds the whole call, retries included.

The circuit breaker counts *calls*, not attempts: a call that ends
TRANSPORT_FAILURE after its retries is one failure. Retries bound one call;
the breaker spares a dead server the calls that follow, for a client (or a
breaker handed to several clients) that makes more than one call. The loop
ends a run at its first TRANSPORT_FAILURE, so it matters across runs.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import Field

from orchestrator.contract import Frozen


class RetryPolicy(Frozen):
    max_attempts: int = Field(default=3, ge=1, description="Attempts in all, the first included.")
    base_s: float = Field(default=0.5, ge=0)
    cap_s: float = Field(default=8.0, ge=0)
    max_retry_after_s: float = Field(default=30.0, ge=0, description="A longer Retry-After ends the retries.")
    breaker_threshold: int = Field(
        default=3, ge=1, description="Consecutive calls ending TRANSPORT_FAILURE (retries spent) that open the circuit."
    )
    breaker_reset_s: float = Field(default=30.0, ge=0, description="How long the circuit stays open.")


class RetryDecision(Frozen):
    retry: bool
    delay_s: float = 0.0
    reason: str = ""


def parse_retry_after(value: str | None, now_epoch: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now = time.time() if now_epoch is None else now_epoch
    return max(0.0, when.timestamp() - now)


def jittered_backoff(policy: RetryPolicy, retry_number: int, rand: Callable[[], float]) -> float:
    """Full-jitter wait before retry ``retry_number`` (1 for the first retry)."""
    ceiling = min(policy.cap_s, policy.base_s * (2 ** (retry_number - 1)))
    return rand() * ceiling


def retry_decision(
    policy: RetryPolicy,
    *,
    attempts_made: int,
    retryable: bool,
    retry_after_s: float | None,
    remaining_s: float,
    rand: Callable[[], float],
) -> RetryDecision:
    """Whether to retry after ``attempts_made`` attempts, and how long to wait first."""
    if not retryable:
        return RetryDecision(retry=False, reason="status is never retried")
    if attempts_made >= policy.max_attempts:
        return RetryDecision(retry=False, reason=f"{attempts_made} attempts made, the most allowed")
    if retry_after_s is not None and retry_after_s > policy.max_retry_after_s:
        return RetryDecision(
            retry=False, reason=f"Retry-After {retry_after_s:g}s exceeds {policy.max_retry_after_s:g}s"
        )
    delay = jittered_backoff(policy, attempts_made, rand)
    if retry_after_s is not None:
        delay = max(delay, retry_after_s)
    if delay >= remaining_s:
        return RetryDecision(
            retry=False, reason=f"backoff {delay:.3f}s would pass the deadline ({remaining_s:.3f}s left)"
        )
    return RetryDecision(retry=True, delay_s=delay, reason="transport failure")


@dataclass
class CircuitBreaker:
    """Opens after ``threshold`` consecutive calls that ended TRANSPORT_FAILURE;
    while open, calls fail fast without touching the server; after ``reset_s``
    a trial call is let through (half-open) and its outcome closes or re-opens
    it. ``record`` is called once per call, never per attempt: counting
    attempts would let the breaker cut one call's own retries short."""

    threshold: int
    reset_s: float
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    opened_at: float | None = None

    def allow(self) -> bool:
        if self.opened_at is None:
            return True
        return self.clock() - self.opened_at >= self.reset_s

    def record(self, transport_failure: bool) -> None:
        if not transport_failure:
            self.failures, self.opened_at = 0, None
            return
        self.failures += 1
        if self.failures >= self.threshold:
            self.opened_at = self.clock()

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        return "half-open" if self.allow() else "open"
