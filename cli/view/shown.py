"""The records a run page shows: a message, a model call, a tool call
candidate, an event, a turn and the run, plain and frozen (``pages`` builds
them from a Trajectory; the templates only lay them out)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

from orchestrator.trajectory import ToolExecutionView, Trajectory
from policies import Flag

COMPLETED = "COMPLETED"
SUMMED = (
    "input_tokens",
    "cached_tokens",
    "prefilled_tokens",
    "output_tokens",
    "cost_usd",
    "total_s",
    "ttft_s",
    "decode_s",
)


@dataclass(frozen=True)
class MessageShown:
    role: str
    content: str
    tool_calls: tuple[str, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True)
class CallShown:
    id: str
    seq: int
    response_seq: int | None
    status: str
    finish_reason: str | None
    text: str
    reasoning: str | None
    reasoning_tokens: int | None
    refusal: str | None
    tool_calls: tuple[tuple[str, str, str], ...]
    error: str | None
    # None: the server sent no such count (shown "-", never 0)
    input_tokens: int | None
    cached_tokens: int | None
    prefilled_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    ttft_s: float | None
    decode_s: float | None
    total_s: float | None
    attempts: int
    retry_of: str | None

    @property
    def bad(self) -> bool:
        return self.status != COMPLETED


@dataclass(frozen=True)
class CandidateShown:
    index: int
    seq: int
    tool_name: str
    arguments: str
    state: str | None
    transitions: tuple[tuple[int, str, str, str, str], ...]
    """(seq, from, to, layer, reason) per escrow transition."""
    execution: ToolExecutionView | None
    edit_diff: str | None
    """The change an edit/write tool call asked for, as a unified diff."""

    @property
    def denied(self) -> bool:
        e = self.execution
        return bool(e and e.decision and e.decision != "allow") or self.state == "REJECTED"

    @property
    def readable_arguments(self) -> str:
        """The arguments as a person reads them: one ``key: value`` line each,
        strings as they are (a command, a path); the content of an edit or a
        write is left to its diff."""
        try:
            args = json.loads(self.arguments)
        except ValueError:
            return self.arguments
        if not isinstance(args, dict):
            return self.arguments
        skip = {"old", "new", "content"} if self.edit_diff else set()
        return "\n".join(
            f"{k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
            for k, v in args.items() if k not in skip
        )

    @property
    def why_not_run(self) -> str | None:
        """Why a candidate never reached its tool: the reason of the escrow
        transition that rejected it."""
        if self.execution is not None or self.state != "REJECTED":
            return None
        return next((t[4] for t in reversed(self.transitions) if t[2] == "REJECTED"), None)


@dataclass(frozen=True)
class EventShown:
    seq: int
    kind: str
    data: str
    summary: str


@dataclass(frozen=True)
class TurnShown:
    turn: int
    committed_seq: int | None
    new_messages: tuple[MessageShown, ...]
    tail: MessageShown | None
    """The request's last message when it is not part of the history: the
    volatile tail (turns and tokens left), replaced every turn."""
    calls: tuple[CallShown, ...]
    candidates: tuple[CandidateShown, ...]
    events: tuple[EventShown, ...]
    opening: bool = False
    """The turn shows the whole first request, not messages new to it."""

    @cached_property
    def haystack(self) -> str:
        """Lower-cased text of the turn, for search within the run; built
        only when a search or the static bundle asks for it."""
        return haystack_of(
            self.new_messages + ((self.tail,) if self.tail else ()), self.calls, self.candidates, self.events
        )

    @property
    def bad(self) -> bool:
        return any(c.bad for c in self.calls) or self.in_flight

    @property
    def in_flight(self) -> bool:
        """A call was made but the turn never committed (the run stopped)."""
        return bool(self.calls) and self.committed_seq is None

    @property
    def cost_usd(self) -> float:
        return sum(c.cost_usd or 0.0 for c in self.calls)

    def total(self, name: str) -> float | None:
        """Summed over the calls that have the figure; None when none has it."""
        values = [getattr(c, name) for c in self.calls if getattr(c, name) is not None]
        return sum(values) if values else None

    @cached_property
    def sums(self) -> dict[str, float | None]:
        """The turn's tokens and timings, summed over its calls, for its header."""
        return {name: self.total(name) for name in SUMMED}


@dataclass(frozen=True)
class RunShown:
    trajectory: Trajectory
    turns: tuple[TurnShown, ...]
    run_events: tuple[EventShown, ...]
    patch: str | None
    patch_files: tuple[str, ...]
    patch_flags: tuple[Flag, ...] = ()

    @property
    def cost_usd(self) -> float:
        return sum(t.cost_usd for t in self.turns)

    def total(self, name: str) -> float | None:
        values = [v for v in (t.total(name) for t in self.turns) if v is not None]
        return sum(values) if values else None


def haystack_of(messages: tuple[MessageShown, ...], calls: tuple[CallShown, ...],
                candidates: tuple[CandidateShown, ...], events: tuple[EventShown, ...]) -> str:
    parts: list[str] = [m.content for m in messages]
    for c in calls:
        parts += [
            c.text,
            c.reasoning or "",
            c.refusal or "",
            c.error or "",
            c.status,
            *(f"{n} {a}" for _, n, a in c.tool_calls),
        ]
    for cand in candidates:
        parts += [cand.tool_name, cand.arguments, *(t[4] for t in cand.transitions)]
        if cand.execution is not None:
            e = cand.execution
            parts += [e.decision or "", e.rule or "", e.reason or "", e.stdout, e.stderr, e.observation]
    parts += [e.kind + " " + e.data for e in events]
    return "\n".join(parts).lower()
