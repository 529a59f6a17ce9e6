"""The running tally of a run, checked against the policy's RunLimits.
Running out is raised as BudgetExhausted, a verdict of its own, never
mistaken for done."""

from __future__ import annotations

import time
from collections.abc import Callable

from orchestrator.costing.money import dollars
from orchestrator.envelope import Envelope
from orchestrator.errors import BudgetExhausted
from policies.model import RunLimits


class Tally:
    """Mutable counters of one run; the loop owns exactly one."""

    def __init__(self, limits: RunLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self.started = clock()
        self.turns = 0
        self.tokens = 0
        self.cost_usd = 0.0

    def add(self, envelope: Envelope, cost_usd: float) -> None:
        self.tokens += envelope.usage.prompt_tokens + envelope.usage.completion_tokens
        self.cost_usd += cost_usd

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self.started

    def check(self) -> None:
        """Raise before starting a turn that the limits no longer allow."""
        lim = self.limits
        if self.turns >= lim.max_turns:
            raise BudgetExhausted(f"turn limit reached ({lim.max_turns})", limit="turns", used=self.turns)
        if lim.max_tokens is not None and self.tokens >= lim.max_tokens:
            raise BudgetExhausted(f"token limit reached ({self.tokens} >= {lim.max_tokens})", limit="tokens")
        if lim.max_cost_usd is not None and self.cost_usd >= lim.max_cost_usd:
            raise BudgetExhausted(f"cost limit reached ({dollars(self.cost_usd)} >= {dollars(lim.max_cost_usd)})",
                                  limit="cost")
        if lim.max_wall_s is not None and self.elapsed_s >= lim.max_wall_s:
            raise BudgetExhausted(f"wall-time limit reached ({self.elapsed_s:.0f}s)", limit="wall_time")

    @property
    def time_left_s(self) -> float | None:
        """Wall time the run has left; the sandbox clamps each command to it."""
        if self.limits.max_wall_s is None:
            return None
        return self.limits.max_wall_s - self.elapsed_s

    @property
    def turns_left(self) -> int:
        return self.limits.max_turns - self.turns
