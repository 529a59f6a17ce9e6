"""What the cost reports are computed from: per-call usage and timing figures
and per-run slices, read from the store (which builds these types and
nothing else of costing), and the small statistics used over them. Pure."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Literal, NamedTuple

from orchestrator.contract import Frozen
from policies.pricing import Price, gpu_seconds

PriceLookup = Callable[[str | None], Price | None]
ESCROW_SOURCE = "escrow"
NO_BATCH = "(no batch)"
NO_VERDICT = "(none)"
NO_ENGINE = "(unknown)"
DAY_FORMAT = "%Y-%m-%d"
DAY_S = 86_400


class RunSlice(NamedTuple):
    """Sums over one run's answered calls to one model. ``cached_tokens`` is
    already clamped to each call's prompt tokens, and None (absent) when no
    call's server sent a cached count.

    A typed tuple, not a validated model: a fleet report builds one per
    (run, model), tens of thousands, and validating each took a third of the
    report's time. The store checks every cell's type as it reads it
    (``store.check.cells``), which is where a damaged value is named."""

    run_id: str
    created_at: float
    status: str
    verdict: str | None
    model: str
    calls: int
    prompt_tokens: int
    cached_tokens: int | None
    completion_tokens: int
    gpu_s: float
    decode_s: float
    retries: int
    tool_s: float = 0.0
    engine: str | None = None
    """The engine that answered; set when grouping by engine."""
    wait_s: float = 0.0
    source: str = ESCROW_SOURCE
    """Who recorded the run: "escrow", or an imported run's source format."""
    batch: str | None = None
    source_usd: float | None = None
    """An imported run's dollars for these calls as its source recorded them
    (None: Escrow's own run, or a source that gave none); used unless repriced."""
    run_level: bool = False
    """The source's run-level totals (figures no call of it gives), not a sum over calls."""
    cached_reported: int | None = None
    """How many of ``calls`` reported a cached count (None: all of them when
    ``cached_tokens`` is given, none when not)."""

    @property
    def cached_known(self) -> bool:
        """Every call of the slice reported a cached count, so its cached
        tokens are a part of a known prompt (a slice whose calls partly
        reported one does not say which of its prompt tokens they cover)."""
        return self.cached_tokens is not None and (self.cached_reported is None or self.cached_reported >= self.calls)


TOKEN_FIGURES = ("prompt_tokens", "cached_tokens", "completion_tokens")
"""A cost line's token figures, by the names its rows use, that a server may not send."""


class CallFigures(Frozen):
    """One model call of a run. ``status`` is None for a call whose response
    was never recorded (the call in flight when a run stopped)."""

    turn: int | None
    model: str
    status: str | None = None
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_source: str = "absent"
    ttft_s: float | None = None
    decode_s: float | None = None
    total_s: float = 0.0
    attempt_s: tuple[float, ...] = ()
    """Each HTTP attempt's duration (the server's time); none recorded: use total_s."""
    wait_s: float = 0.0
    """Seconds the client slept between attempts (retry backoff)."""
    retries: int = 0
    cached_reported: int | None = None
    """The server's own cached count where it exceeded the prompt (the
    recorded one is clamped to the prompt); None: not clamped."""
    source_usd: float | None = None
    """An imported call's dollars as its source recorded them; None: Escrow's
    own call, or the source gave none."""
    absent: frozenset[str] = frozenset()
    """Of ``TOKEN_FIGURES``, those the server (or source) never sent: recorded 0, shown absent."""

    @property
    def gpu_s(self) -> float:
        """What GPU time is charged for (``policies.pricing.gpu_seconds``)."""
        return gpu_seconds(self.attempt_s, self.total_s)

    @property
    def has_usage(self) -> bool:
        """Answered with a prompt size: a failed call reports no usage
        (source ``absent``), which is no 0-token prompt."""
        return self.status is not None and self.prompt_source != "absent"

    @property
    def cached(self) -> int:
        """Cached tokens are a part of the prompt; a server reporting more is clamped."""
        return min(self.cached_prompt_tokens, self.prompt_tokens)


class ToolFigures(Frozen):
    """Tool executions of one turn: how many and their summed seconds."""

    turn: int | None
    count: int = 0
    seconds: float = 0.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between closest
    ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def percentile_of_counts(counts: Sequence[tuple[float, int]], q: float) -> float | None:
    """``percentile`` of the values a histogram of (value, count) pairs stands
    for, without expanding it."""
    ordered = sorted((value, n) for value, n in counts if n > 0)
    total = sum(n for _, n in ordered)
    if total == 0:
        return None
    rank = (total - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    low_value = high_value = ordered[-1][0]
    seen = 0
    for value, n in ordered:
        if seen <= low < seen + n:
            low_value = value
        if seen <= high < seen + n:
            high_value = value
            break
        seen += n
    return low_value + (high_value - low_value) * (rank - low)


def ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


GroupBy = Literal["model", "day", "status", "verdict", "engine", "source", "batch"]
GROUP_BY: tuple[str, ...] = ("model", "day", "status", "verdict", "engine", "source", "batch")


def group_key(by: str, piece: RunSlice) -> str:
    if by == "model":
        return piece.model
    if by == "day":
        return day_key(piece.created_at)
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


def day_key(created_at: float) -> str:
    return datetime.fromtimestamp(created_at, tz=timezone.utc).strftime(DAY_FORMAT)


def keyer(by: str) -> Callable[[RunSlice], str]:
    """``group_key`` for many pieces: by day, one label a UTC day."""
    if by != "day":
        return lambda p: group_key(by, p)
    labels: dict[float, str] = {}

    def day(p: RunSlice) -> str:
        # One datetime a UTC day, not one a piece. A time within a second of
        # midnight gets its own, as datetime rounds it to microseconds.
        whole = p.created_at // DAY_S
        if not 1 <= p.created_at - whole * DAY_S <= DAY_S - 1:
            return day_key(p.created_at)
        if whole not in labels:
            labels[whole] = day_key(p.created_at)
        return labels[whole]

    return day
