"""``ReplayModel``: the Model port over a recording. Before serving turn t's
recorded envelope it checks that the request today's loop built is
byte-identical (sha256 of the canonical JSON) to the one recorded."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping

from pydantic import computed_field

from orchestrator.canonical import canonical_json, sha256_hex
from orchestrator.contract import Frozen, Message, ModelRequest
from orchestrator.envelope import Envelope
from orchestrator.ports import Model
from orchestrator.replay.divergence import compare
from orchestrator.replay.errors import Divergence
from orchestrator.replay.recorded import RecordedTurn


class Cursor:
    """Where the replay stands: the turn and the candidate in flight, set by
    the ReplayJournal as the loop announces them."""

    def __init__(self) -> None:
        self.turn = -1
        self.candidate = -1


class TurnCheck(Frozen):
    turn: int
    recorded_sha256: str
    replayed_sha256: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def identical(self) -> bool:
        return self.recorded_sha256 == self.replayed_sha256


class RequestHasher:
    """sha256 of a request's canonical JSON, equal to ``ModelRequest.sha256()``
    but without re-serialising the whole history each turn: history is
    append-only and the context hands back the same Message objects, so each
    message's canonical text is computed once. (Hashing whole requests is
    otherwise quadratic in the run's length and dominates replay time.)"""

    def __init__(self) -> None:
        self._texts: dict[int, tuple[Message, str]] = {}

    def _message(self, message: Message) -> str:
        hit = self._texts.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        text = canonical_json(message.model_dump(mode="json"))
        self._texts[id(message)] = (message, text)
        return text

    def canonical(self, request: ModelRequest) -> str:
        body = request.model_dump(mode="json", exclude={"messages"})
        messages = "[" + ",".join(self._message(m) for m in request.messages) + "]"
        parts = [json.dumps(key, ensure_ascii=False) + ":" + (messages if key == "messages" else canonical_json(body[key]))
                 for key in sorted([*body, "messages"])]
        return "{" + ",".join(parts) + "}"

    def sha256(self, request: ModelRequest) -> str:
        return sha256_hex(self.canonical(request))


def request_divergence(turn: int, recorded: RecordedTurn, request: ModelRequest) -> Divergence:
    paths, diff = compare(json.loads(recorded.request_json), json.loads(request.canonical()))
    return Divergence(turn=turn, kind="request", field=paths[0] if paths else "$", fields=paths, diff=diff)


class ReplayModel:
    """Serves recorded envelopes up to ``live_from`` (all turns when None),
    then hands the calls to ``live``. ``strict`` raises the first request
    divergence; otherwise it is kept in ``mismatches`` and replay goes on
    (re-execution, where drifted tool output changes later requests)."""

    def __init__(self, turns: Mapping[int, RecordedTurn], cursor: Cursor, *, strict: bool = True,
                 live: Model | None = None, live_from: int | None = None) -> None:
        self.turns = turns
        self.cursor = cursor
        self.strict = strict
        self.live = live
        self.live_from = live_from
        self.checks: list[TurnCheck] = []
        self.mismatches: list[Divergence] = []
        self.hasher = RequestHasher()

    def is_live(self, turn: int) -> bool:
        return self.live_from is not None and turn >= self.live_from

    def call(self, request: ModelRequest, *, cancel: threading.Event | None = None) -> Envelope:
        turn = self.cursor.turn
        if self.is_live(turn):
            assert self.live is not None
            return self.live.call(request, cancel=cancel)
        recorded = self.turns.get(turn)
        if recorded is None:
            raise Divergence(turn=turn, kind="exhausted", field="turns",
                             diff=f"the loop asked for turn {turn}; the recording has {len(self.turns)} turns\n")
        sha = self.hasher.sha256(request)
        self.checks.append(TurnCheck(turn=turn, recorded_sha256=recorded.request_sha256, replayed_sha256=sha))
        if sha != recorded.request_sha256:
            mismatch = request_divergence(turn, recorded, request)
            if self.strict:
                raise mismatch
            self.mismatches.append(mismatch)
        if recorded.envelope_json is None:
            raise Divergence(turn=turn, kind="exhausted", field="envelope",
                             diff=f"the recording stops at turn {turn}, in flight: its request has no response\n")
        return Envelope.model_validate_json(recorded.envelope_json)

    def recorded_cost(self, envelope: Envelope) -> float:  # noqa: ARG002 - the Agent's cost_of signature
        """The cost recorded for the turn being served, so cost limits replay
        exactly even if the price table changed since."""
        recorded = self.turns.get(self.cursor.turn)
        return recorded.cost_usd if recorded is not None else 0.0
