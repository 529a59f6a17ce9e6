"""``ReplayJournal``: wraps the journal a replay records into. It moves the
Cursor as the loop announces turns and candidates, and checks each
candidate's perimeter outcome against the recording, which catches a call now
rejected at the parse or schema layer that once ran (or the reverse)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from orchestrator.candidate import Transition
from orchestrator.canonical import canonical_json
from orchestrator.contract import Message, ModelRequest, ToolCall
from orchestrator.envelope import Envelope
from orchestrator.ports import DecisionLike, Journal, ToolOutcome
from orchestrator.replay.divergence import compare
from orchestrator.replay.errors import Divergence
from orchestrator.replay.recorded import RecordedTurn
from orchestrator.replay.replay_model import Cursor
from orchestrator.replay.replay_tools import check_call, in_flight, recorded_tool


class NullJournal:
    """Records nothing: for replays run only to check (``--no-record``)."""

    def request(self, turn: int, request: ModelRequest) -> Any:
        return turn

    def envelope(self, turn: int, call_ref: Any, envelope: Envelope, cost_usd: float) -> None:
        pass

    def candidate(self, turn: int, call_ref: Any, index: int, call: ToolCall) -> Any:
        return index

    def transition(self, candidate_ref: Any, transition: Transition) -> None:
        pass

    def tool(self, candidate_ref: Any, name: str, args: BaseModel | None, decision: DecisionLike | None,
             outcome: ToolOutcome) -> None:
        pass

    def event(self, turn: int | None, kind: str, data: dict[str, Any]) -> None:
        pass

    def end_turn(self, turn: int, appended: tuple[Message, ...]) -> None:
        pass


class ReplayJournal:
    def __init__(self, inner: Journal, turns: Mapping[int, RecordedTurn], cursor: Cursor) -> None:
        self.inner = inner
        self.turns = turns
        self.cursor = cursor
        self.verdict: dict[str, Any] | None = None
        self.staged: list[str] = []

    def request(self, turn: int, request: ModelRequest) -> Any:
        self.cursor.turn, self.cursor.candidate = turn, -1
        self.staged = []
        return self.inner.request(turn, request)

    def envelope(self, turn: int, call_ref: Any, envelope: Envelope, cost_usd: float) -> None:
        self.inner.envelope(turn, call_ref, envelope, cost_usd)

    def candidate(self, turn: int, call_ref: Any, index: int, call: ToolCall) -> Any:
        self.cursor.candidate = index
        self.staged.append(canonical_json(call.model_dump(mode="json")))
        return self.inner.candidate(turn, call_ref, index, call)

    def transition(self, candidate_ref: Any, transition: Transition) -> None:
        self.inner.transition(candidate_ref, transition)

    def tool(self, candidate_ref: Any, name: str, args: BaseModel | None, decision: DecisionLike | None,
             outcome: ToolOutcome) -> None:
        self.inner.tool(candidate_ref, name, args, decision, outcome)
        if self.cursor.turn not in self.turns:
            return  # a live (forked) turn: nothing recorded to compare with
        recorded = recorded_tool(self.turns, self.cursor)
        turn, index = self.cursor.turn, self.cursor.candidate
        in_flight(self.turns, turn, recorded)
        check_call(turn, index, recorded, name, args)
        assert recorded is not None
        if recorded.decision != (decision.effect if decision else None):
            raise Divergence(turn=turn, kind="acl", field=f"tool_calls[{index}].decision",
                             recorded=recorded.decision, replayed=decision.effect if decision else None,
                             diff=f"- {recorded.decision}\n+ {decision.effect if decision else None}\n")
        if not recorded.committed and outcome.observation != recorded.outcome.observation:
            raise Divergence(turn=turn, kind="perimeter", field=f"tool_calls[{index}].observation",
                             recorded=recorded.outcome.observation, replayed=outcome.observation,
                             diff=f"- {recorded.outcome.observation}\n+ {outcome.observation}\n")

    def event(self, turn: int | None, kind: str, data: dict[str, Any]) -> None:
        if kind == "verdict":
            self.verdict = dict(data)
        self.inner.event(turn, kind, data)

    def end_turn(self, turn: int, appended: tuple[Message, ...]) -> None:
        recorded = self.turns.get(turn)
        # Called in the loop's finally: a divergence already on its way out names the cause.
        if recorded is not None and recorded.committed and not isinstance(sys.exc_info()[1], Divergence):
            check_staged(turn, recorded.staged, tuple(self.staged))
        self.inner.end_turn(turn, appended)


def check_staged(turn: int, recorded: tuple[str, ...], replayed: tuple[str, ...]) -> None:
    """The candidates a turn staged must be the recorded ones, all of them:
    a recorded tool call today's loop no longer stages (or a new one) is a
    divergence of this turn, not of the next request."""
    for index in range(max(len(recorded), len(replayed))):
        before: Any = json.loads(recorded[index]) if index < len(recorded) else None
        after: Any = json.loads(replayed[index]) if index < len(replayed) else None
        if before == after:
            continue
        field = f"candidates[{index}]"
        if after is None:
            diff = (
                f"the recording staged candidate {index} ({before.get('name')}); today's loop did not\n"
                f"- {recorded[index]}\n"
            )
        elif before is None:
            diff = (
                f"today's loop staged candidate {index} ({after.get('name')}); the recording has none\n"
                f"+ {replayed[index]}\n"
            )
        else:
            paths, diff = compare(before, after)
            field = f"{field}.{paths[0]}"
        raise Divergence(turn=turn, kind="candidates", field=field, recorded=before, replayed=after, diff=diff)
