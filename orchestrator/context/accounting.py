"""Prompt-token accounting of a multi-turn trajectory.

A trajectory whose first prompt has S0 tokens and whose every turn appends
delta tokens re-sends the whole conversation on each of its N calls; a server
with an ideal prefix cache prefills only what is new.
"""

from __future__ import annotations


def _check(s0: int, delta: int, turns: int) -> None:
    if s0 < 0 or delta < 0 or turns < 0:
        raise ValueError(f"need non-negative S0, delta, N (got {s0}, {delta}, {turns})")


def resent_tokens_no_cache(s0: int, delta: int, turns: int) -> int:
    """N*S0 + delta*N(N-1)/2: every prompt prefilled in full."""
    _check(s0, delta, turns)
    return turns * s0 + delta * turns * (turns - 1) // 2


def prefill_tokens_ideal_cache(s0: int, delta: int, turns: int) -> int:
    """S0 + (N-1)*delta: the first prompt, then only each turn's new tokens."""
    _check(s0, delta, turns)
    return 0 if turns == 0 else s0 + (turns - 1) * delta


def cache_saving_factor(s0: int, delta: int, turns: int) -> float:
    """How many times fewer tokens an ideal prefix cache prefills."""
    cached = prefill_tokens_ideal_cache(s0, delta, turns)
    return resent_tokens_no_cache(s0, delta, turns) / cached if cached else 1.0
