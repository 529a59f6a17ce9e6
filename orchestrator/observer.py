"""Watching a run as it happens, for a display. Pure: no terminal code here.

Two hooks, and nothing in the loop changes for them:

* ``StreamObserver`` gets the model's words while they stream (the model
  client calls it from the accumulator, chunk by chunk);
* ``ObservedJournal`` is a Journal that records through the real one first and
  then tells a ``JournalObserver`` the same thing: the envelope, each
  candidate's escrow path, its ACL decision and its result.

An observer only reads; it can neither change a payload nor skip a record.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel

from orchestrator.candidate import Transition
from orchestrator.contract import Message, ModelRequest, ToolCall
from orchestrator.envelope import Envelope
from orchestrator.ports import DecisionLike, Journal, ToolOutcome

DeltaKind = Literal["text", "reasoning", "tool"]


class StreamObserver(Protocol):
    def on_attempt(self, number: int) -> None:
        """An HTTP attempt starts; what an earlier attempt streamed is void."""
        ...

    def on_delta(self, kind: DeltaKind, text: str) -> None:
        """A piece of the answer arrived: words, reasoning or tool-call arguments."""
        ...


class JournalObserver(Protocol):
    """What the loop records, told after it is recorded. Refs are the journal's."""

    def request(self, turn: int, request: ModelRequest) -> None: ...

    def envelope(self, turn: int, envelope: Envelope, cost_usd: float) -> None: ...

    def candidate(self, turn: int, ref: Any, index: int, call: ToolCall) -> None: ...

    def transition(self, ref: Any, transition: Transition) -> None: ...

    def tool(
        self, ref: Any, name: str, args: BaseModel | None, decision: DecisionLike | None, outcome: ToolOutcome
    ) -> None: ...

    def event(self, turn: int | None, kind: str, data: dict[str, Any]) -> None: ...

    def end_turn(self, turn: int) -> None: ...


class RunObserver(StreamObserver, JournalObserver, Protocol):
    """Both hooks: what a live display implements."""


class ObservedJournal:
    """A Journal that records through ``journal``, then tells ``observer``."""

    def __init__(self, journal: Journal, observer: JournalObserver) -> None:
        self.journal, self.observer = journal, observer

    def request(self, turn: int, request: ModelRequest) -> Any:
        ref = self.journal.request(turn, request)
        self.observer.request(turn, request)
        return ref

    def envelope(self, turn: int, call_ref: Any, envelope: Envelope, cost_usd: float) -> None:
        self.journal.envelope(turn, call_ref, envelope, cost_usd)
        self.observer.envelope(turn, envelope, cost_usd)

    def candidate(self, turn: int, call_ref: Any, index: int, call: ToolCall) -> Any:
        ref = self.journal.candidate(turn, call_ref, index, call)
        self.observer.candidate(turn, ref, index, call)
        return ref

    def transition(self, candidate_ref: Any, transition: Transition) -> None:
        self.journal.transition(candidate_ref, transition)
        self.observer.transition(candidate_ref, transition)

    def tool(self, candidate_ref: Any, name: str, args: BaseModel | None, decision: DecisionLike | None,
             outcome: ToolOutcome) -> None:
        self.journal.tool(candidate_ref, name, args, decision, outcome)
        self.observer.tool(candidate_ref, name, args, decision, outcome)

    def event(self, turn: int | None, kind: str, data: dict[str, Any]) -> None:
        self.journal.event(turn, kind, data)
        self.observer.event(turn, kind, data)

    def end_turn(self, turn: int, appended: tuple[Message, ...]) -> None:
        self.journal.end_turn(turn, appended)
        self.observer.end_turn(turn)
