"""Accumulates a response, streamed or whole, into one payload. Pure.

Streamed tool calls arrive as deltas keyed by ``index``: the id and name
usually come once, the arguments in pieces. Some servers repeat the whole
name in later deltas; a name equal to the one already held is that repeat,
not a continuation (quirk ``repeated_tool_name``). Reasoning deltas
(``reasoning_content`` or ``reasoning``) are kept apart from the text and
staged against M_max like any other byte. Every piece passes the stream
monitor as it arrives; the first Trip is kept and the caller cancels. A
non-streamed message goes through the same path as one big delta, so both
modes obey the same invariants.
"""

from __future__ import annotations

from typing import Any

from orchestrator.adapters.model_client.monitor import StreamMonitor, Trip
from orchestrator.adapters.model_client.wire import WireCompletion, WireMessage, WireTimings, WireUsage
from orchestrator.contract import ToolCall
from orchestrator.envelope import Payload
from orchestrator.logprobs import int_ids
from orchestrator.observer import StreamObserver


class _ToolCallParts:
    __slots__ = ("id", "name", "arguments")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


class ResponseAccumulator:
    def __init__(
        self, monitor: StreamMonitor, *, keep_logprobs: bool = False, observer: StreamObserver | None = None
    ) -> None:
        self.monitor = monitor
        self.keep_logprobs = keep_logprobs
        self.observer = observer
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.tool_calls: dict[int, _ToolCallParts] = {}
        self.finish_reason: str | None = None
        self.usage: WireUsage | None = None
        self.timings: WireTimings | None = None
        self.model: str | None = None
        self.system_fingerprint: str | None = None
        self.logprobs: list[Any] | None = [] if keep_logprobs else None
        self.prompt_token_ids: list[int] | None = None
        self.token_ids: list[int] | None = None
        self.bad_token_ids = False
        self.trip: Trip | None = None
        self.chunks = 0

    def add(self, body: WireCompletion) -> bool:
        """Take one chunk (or a whole body). True if it carried payload bytes."""
        self.chunks += 1
        if body.model and self.model is None:
            self.model = body.model
        if body.system_fingerprint:
            self.system_fingerprint = body.system_fingerprint
        if body.usage is not None:
            self.usage = body.usage
        if body.timings is not None:
            self.timings = body.timings
        extra = body.model_extra or {}
        if "prompt_token_ids" in extra:
            # vLLM return_token_ids. Anything but a list of integers is not
            # read (no id is coerced from a string); the raw response keeps it.
            prompt_ids = int_ids(extra["prompt_token_ids"])
            self.prompt_token_ids = None if prompt_ids is None else list(prompt_ids)
        got_payload = False
        for choice in body.choices:
            if choice.index != 0:
                continue  # n=1 is what Escrow asks for; extra choices stay in the raw record only
            message = choice.delta if choice.delta is not None else choice.message
            if message is not None:
                got_payload = self._message(message)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
            if self.logprobs is not None and choice.logprobs is not None and choice.logprobs.content:
                self.logprobs.extend(choice.logprobs.content)
            if "token_ids" in (choice.model_extra or {}) and not self.bad_token_ids:
                ids = int_ids((choice.model_extra or {})["token_ids"])
                if ids is None:  # one unreadable piece: the whole sequence is unknown, not shortened
                    self.bad_token_ids, self.token_ids = True, None
                else:
                    self.token_ids = (self.token_ids or []) + list(ids)
        return got_payload

    def _message(self, message: WireMessage) -> bool:
        got = False
        reasoning = message.reasoning_content or message.reasoning
        if reasoning:
            got = True
            self.reasoning.append(reasoning)
            self._check(self.monitor.other(reasoning))
            self._tell("reasoning", reasoning)
        if message.content:
            got = True
            self.text.append(message.content)
            self._check(self.monitor.content(message.content))
            self._tell("text", message.content)
        if message.refusal:
            got = True
            self.refusal.append(message.refusal)
            self._check(self.monitor.other(message.refusal))
        for position, call in enumerate(message.tool_calls or ()):
            got = True
            index = call.index if call.index is not None else position
            parts = self.tool_calls.get(index)
            if parts is None:
                parts = self.tool_calls[index] = _ToolCallParts()
            if call.id and call.id != parts.id:
                parts.id = call.id
                self._check(self.monitor.other(call.id))
            function = call.function
            if function is not None:
                if function.name and function.name != parts.name:
                    parts.name += function.name
                    self._check(self.monitor.other(function.name))
                if function.arguments:
                    parts.arguments.append(function.arguments)
                    self._check(self.monitor.arguments(index, function.arguments))
                    self._tell("tool", function.arguments)
        return got

    def _tell(self, kind, text: str) -> None:
        if self.observer is not None:
            self.observer.on_delta(kind, text)

    def _check(self, trip: Trip | None) -> None:
        if trip is not None and self.trip is None:
            self.trip = trip

    def payload(self) -> Payload:
        calls = tuple(
            ToolCall(id=parts.id or f"call_{index}", name=parts.name, arguments="".join(parts.arguments))
            for index, parts in sorted(self.tool_calls.items())
        )
        refusal = "".join(self.refusal) or None
        reasoning = "".join(self.reasoning) or None
        return Payload(text="".join(self.text), tool_calls=calls, refusal=refusal, reasoning=reasoning)
