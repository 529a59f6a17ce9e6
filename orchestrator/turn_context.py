"""``TurnContext``: the loop's Context port over ``orchestrator.context.ContextAssembler``.

It fixes everything about a request that is not the prompt (model, K_max,
T_max, M_max, stop, sampling, constraint), hands each turn's new messages to the context
in one append, and turns compaction and calibration into events to record.
"""

from __future__ import annotations

from typing import Any

from orchestrator.context import ContextAssembler, RecordingCounter, RenderedContext
from orchestrator.contract import Constraint, Message, ModelRequest, Sampling
from orchestrator.envelope import Envelope


class RequestShape:
    """The non-prompt fields of every request of a run."""

    def __init__(
        self,
        *,
        model: str,
        max_tokens: int | None = None,
        deadline_s: float = 120.0,
        max_payload_bytes: int = 1_000_000,
        stop: tuple[str, ...] = (),
        sampling: Sampling = Sampling(),
        stream: bool = True,
        constraint: Constraint | None = None,
    ) -> None:
        self.fields: dict[str, Any] = dict(
            deadline_s=deadline_s, max_payload_bytes=max_payload_bytes, stop=stop, sampling=sampling, stream=stream,
            constraint=constraint,
        )
        self.model = model
        self.max_tokens = max_tokens


class TurnContext:
    def __init__(
        self, context: ContextAssembler, shape: RequestShape, recording: RecordingCounter | None = None
    ) -> None:
        """``recording``: the counter the context counts with, when its counts
        come from a server; new counts are emitted as events so that an offline
        replay can serve them."""
        self.context = context
        self.shape = shape
        self.recording = recording
        self._emitted: set[str] = set()
        self._pending: list[tuple[Message, bool]] = []
        self._pending_turn = -1
        self._last: RenderedContext | None = None
        self._events: list[dict[str, Any]] = []

    def append(self, message: Message, *, elidable: bool = False) -> None:
        self._pending.append((message, elidable))

    def reshape(self, *, model: str, max_tokens: int | None, sampling: Sampling) -> None:
        """Switch model, K_max and sampling from the next request on (a fork's overrides)."""
        self.shape.model = model
        self.shape.max_tokens = max_tokens
        self.shape.fields["sampling"] = sampling

    def _flush(self) -> None:
        if self._pending:
            messages = [m for m, _ in self._pending]
            flags = [e for _, e in self._pending]
            self.context.append(messages, turn=self._pending_turn, elidable=flags)
            self._pending = []

    def build(self, turn: int, *, turns_left: int) -> ModelRequest:
        self._flush()
        self._pending_turn = turn
        rendered = self.context.render(turn=turn, turns_left=turns_left)
        for event in rendered.compactions:
            self._events.append({"kind": "compaction", **event.model_dump(mode="json")})
        self._last = rendered
        self._emit_counts()
        return rendered.build_request(model=self.shape.model, max_tokens=self.shape.max_tokens, **self.shape.fields)

    def _emit_counts(self) -> None:
        if self.recording is None:
            return
        new = {k: v for k, v in self.recording.counts.items() if k not in self._emitted}
        if new:
            self._emitted.update(new)
            self._events.append({"kind": "token_counts", "tokenizer": self.recording.name, "counts": new})

    def observe(self, envelope: Envelope) -> None:
        usage = envelope.usage
        if self._last is None or usage.prompt_source != "server" or usage.prompt_tokens <= 0:
            return
        event = self.context.calibrate(self._last, reported_prompt_tokens=usage.prompt_tokens)
        self._events.append({"kind": "calibration", **event.model_dump(mode="json")})

    def drain_events(self) -> list[dict[str, Any]]:
        events, self._events = self._events, []
        return events
