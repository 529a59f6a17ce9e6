"""``ReplayModel``: the Model port over a recording. Before serving turn t's
recorded envelope it checks that the request today's loop built is
byte-identical (sha256 of the canonical JSON) to the one recorded."""

from __future__ import annotations

import hashlib
import json
import operator
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import computed_field

from orchestrator.canonical import canonical_json, sha256_hex
from orchestrator.contract import Frozen, Message, ModelRequest
from orchestrator.envelope import Envelope
from orchestrator.ports import Model
from orchestrator.replay.divergence import compare
from orchestrator.replay.errors import STORED, Divergence, recording_ends
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

    @computed_field  # type: ignore[prop-decorator]  # mypy cannot type a decorator over a property
    @property
    def identical(self) -> bool:
        return self.recorded_sha256 == self.replayed_sha256


class RequestHasher:
    """sha256 of a request's canonical JSON, equal to ``ModelRequest.sha256()``
    but linear over a run instead of quadratic. History is append-only and the
    context hands back the same Message objects, so a running sha256 over the
    bytes up to the newest stable message is extended each turn and copied to
    finish the hash; each message and the tool list are serialised once.
    Anything else (compaction rewrote a message, the header changed) starts
    the running hash again."""

    def __init__(self) -> None:
        self._texts: dict[int, tuple[Message, str]] = {}
        self._tools: tuple[object, str] | None = None
        self._header = ""
        self._fed: list[Message] = []
        self._running = hashlib.sha256()
        self._parts_of: tuple[dict[str, Any], object, tuple[str, str]] | None = None

    def _message(self, message: Message) -> str:
        hit = self._texts.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        text = canonical_json(message.model_dump(mode="json"))
        self._texts[id(message)] = (message, text)
        return text

    def _tools_text(self, request: ModelRequest) -> str:
        if self._tools is None or not _same_items(self._tools[0], request.tools):
            self._tools = (request.tools, canonical_json([t.model_dump(mode="json") for t in request.tools]))
        return self._tools[1]

    def _parts(self, request: ModelRequest) -> tuple[str, str]:
        """The canonical text up to the opening of the messages list, and the
        fields after it (keys are sorted, so "messages" sits in the middle)."""
        body = request.model_dump(mode="json", exclude={"messages", "tools"})
        # The fields around the messages rarely change within a run: serialised once while they hold.
        if self._parts_of is not None and self._parts_of[0] == body and _same_items(self._parts_of[1], request.tools):
            return self._parts_of[2]
        keys = sorted([*body, "messages", "tools"])
        at = keys.index("messages")

        def item(key: str) -> str:
            value = self._tools_text(request) if key == "tools" else canonical_json(body[key])
            return json.dumps(key, ensure_ascii=False) + ":" + value

        before = ",".join(item(k) for k in keys[:at])
        parts = "{" + before + ("," if before else "") + '"messages":[', ",".join(item(k) for k in keys[at + 1:])
        self._parts_of = (body, request.tools, parts)
        return parts

    def canonical(self, request: ModelRequest) -> str:
        """The whole canonical text (what ``sha256`` hashes), built the same way."""
        head, rest = self._parts(request)
        return head + ",".join(self._message(m) for m in request.messages) + "]" + ("," + rest if rest else "") + "}"

    def sha256(self, request: ModelRequest) -> str:
        head, rest = self._parts(request)
        messages = request.messages
        stable = len(self._fed)
        if (
            head != self._header
            or len(messages) <= stable
            or not all(map(operator.is_, self._fed, messages))
        ):
            self._header, self._fed, self._running = head, [], hashlib.sha256(head.encode("utf-8"))
            stable = 0
        # Extend the running hash with every message but the newest (the volatile tail).
        for message in messages[stable:-1]:
            self._running.update(((b"," if self._fed else b"") + self._message(message).encode("utf-8")))
            self._fed.append(message)
        final = self._running.copy()
        final.update(((b"," if self._fed else b"") + self._message(messages[-1]).encode("utf-8")))
        final.update(("]" + ("," + rest if rest else "") + "}").encode("utf-8"))
        return final.hexdigest()


def _same_items(held: object, tools: tuple[object, ...]) -> bool:
    """The same tool objects (frozen, so the same text): each request holds a new
    tuple of them, made as the request is validated."""
    return isinstance(held, tuple) and len(held) == len(tools) and all(map(operator.is_, held, tools))


def request_divergence(turn: int, recorded: RecordedTurn, request: ModelRequest) -> Divergence:
    paths, diff = compare(json.loads(recorded.request_json), json.loads(request.canonical()))
    return Divergence(turn=turn, kind="request", field=paths[0] if paths else "$", fields=paths, diff=diff)


class ReplayModel:
    """Serves recorded envelopes up to ``live_from`` (all turns when None),
    then hands the calls to ``live``. ``strict`` raises the first request
    divergence; otherwise it is kept in ``mismatches`` and replay goes on
    (re-execution, where drifted tool output changes later requests)."""

    def __init__(self, turns: Mapping[int, RecordedTurn], cursor: Cursor, *, strict: bool = True,
                 live: Model | None = None, live_from: int | None = None,
                 noise: Callable[[str, str], bool] = lambda recorded, replayed: False,
                 on_live: Callable[[int], None] = lambda turn: None) -> None:
        self.turns = turns
        self.cursor = cursor
        self.strict = strict
        self.live = live
        self.live_from = live_from
        self.checks: list[TurnCheck] = []
        self.mismatches: list[Divergence] = []
        self.noise_mismatches: list[Divergence] = []
        self.noise = noise
        self.on_live = on_live
        self.hasher = RequestHasher()

    def is_live(self, turn: int) -> bool:
        return self.live_from is not None and turn >= self.live_from

    def call(self, request: ModelRequest, *, cancel: threading.Event | None = None) -> Envelope:
        turn = self.cursor.turn
        if self.is_live(turn):
            assert self.live is not None
            self.on_live(turn)
            return self.live.call(request, cancel=cancel)
        recorded = self.turns.get(turn)
        if recorded is None and self.turns and not self.turns[max(self.turns)].committed:
            raise recording_ends(max(self.turns), f"the loop asked for turn {turn}")
        if recorded is None:
            raise Divergence(turn=turn, kind="exhausted", field="turns",
                             diff=f"the loop asked for turn {turn}; the recording has {len(self.turns)} turns\n")
        if sha256_hex(recorded.request_json) != recorded.request_sha256:
            # The stored request (its messages and tools, from their blobs) is
            # itself compared, not only its hash column: under --force a row
            # or blob altered in place must not replay as IDENTICAL.
            altered = Divergence(turn=turn, kind=STORED, field="request_json", diff=(
                "the stored request does not hash to its recorded sha256 "
                f"({recorded.request_sha256[:16]}): the store was altered\n"))
            if self.strict:
                raise altered
            self.mismatches.append(altered)
        sha = self.hasher.sha256(request)
        self.checks.append(TurnCheck(turn=turn, recorded_sha256=recorded.request_sha256, replayed_sha256=sha))
        if sha != recorded.request_sha256:
            mismatch = request_divergence(turn, recorded, request)
            if self.strict:
                raise mismatch
            # A request that differs only by a re-executed tool's volatile output is noise too.
            noisy = self.noise(recorded.request_json, request.canonical())
            (self.noise_mismatches if noisy else self.mismatches).append(mismatch)
        if recorded.envelope_json is None:
            raise recording_ends(turn, "its request is recorded, its response is not")
        return Envelope.model_validate_json(recorded.envelope_json)

    def recorded_cost(self, envelope: Envelope) -> float:  # noqa: ARG002 - the Agent's cost_of signature
        """The cost recorded for the turn being served, so cost limits replay
        exactly even if the price table changed since."""
        recorded = self.turns.get(self.cursor.turn)
        return recorded.cost_usd if recorded is not None else 0.0
