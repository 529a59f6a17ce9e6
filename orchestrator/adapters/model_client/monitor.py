"""The incremental stream monitor: host-side invariants checked per delta.

Two invariants, both pure and O(delta) per call:

* every tool call's arguments (and the content, when the request asked for
  JSON output) stay a valid JSON *prefix*: some continuation could still
  make them a JSON value. The first byte that rules that out trips the
  monitor, so the client can cancel the stream at that token rather than
  after K_max tokens;
* the bytes staged on the host (text, refusal, tool names and arguments)
  never exceed M_max.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.adapters.model_client.normalize import Cause

# Parser modes.
_VALUE, _ARRAY_FIRST, _OBJ_FIRST, _KEY, _COLON, _AFTER, _STRING, _ESC, _UHEX, _NUMBER, _LITERAL = range(11)
# Number sub-states; the terminal ones may end the number.
_MINUS, _ZERO, _INT, _DOT, _FRAC, _E, _ESIGN, _EXP = range(8)
_NUM_TERMINAL = frozenset({_ZERO, _INT, _FRAC, _EXP})
_WS = " \t\n\r"
_STRING_RUN = re.compile(r'[^"\\\x00-\x1f]+')
_WS_RUN = re.compile(r"[ \t\n\r]+")
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}


class JsonPrefix:
    """Pushdown automaton that accepts exactly the prefixes of one JSON value."""

    __slots__ = ("_stack", "_mode", "_in_key", "_num", "_pending", "_hex", "failed_at", "consumed")

    def __init__(self) -> None:
        self._stack: list[str] = []
        self._mode = _VALUE
        self._in_key = False
        self._num = _INT
        self._pending = ""
        self._hex = 0
        self.failed_at: int | None = None
        self.consumed = 0

    @property
    def complete(self) -> bool:
        """True when what was fed is a whole JSON value."""
        if self.failed_at is not None or self._stack:
            return False
        return self._mode == _AFTER or (self._mode == _NUMBER and self._num in _NUM_TERMINAL)

    def feed(self, text: str) -> bool:
        """Consume ``text``; False (and ``failed_at`` set) once it cannot be a prefix."""
        if self.failed_at is not None:
            return False
        i, n = 0, len(text)
        while i < n:
            mode = self._mode
            if mode == _STRING:
                run = _STRING_RUN.match(text, i)
                if run:
                    i = run.end()
                    continue
            elif mode != _NUMBER and mode != _LITERAL and mode != _ESC and mode != _UHEX:
                run = _WS_RUN.match(text, i)
                if run:
                    i = run.end()
                    continue
            if not self._step(text[i]):
                self.failed_at = self.consumed + i
                return False
            i += 1
        self.consumed += n
        return True

    def _step(self, c: str) -> bool:
        mode = self._mode
        if mode == _STRING:
            if c == '"':
                self._mode = _COLON if self._in_key else _AFTER
                return True
            if c == "\\":
                self._mode = _ESC
                return True
            return False  # a raw control character
        if mode == _ESC:
            if c == "u":
                self._mode, self._hex = _UHEX, 0
                return True
            self._mode = _STRING
            return c in '"\\/bfnrt'
        if mode == _UHEX:
            if c not in "0123456789abcdefABCDEF":
                return False
            self._hex += 1
            if self._hex == 4:
                self._mode = _STRING
            return True
        if mode == _LITERAL:
            if c != self._pending[0]:
                return False
            self._pending = self._pending[1:]
            if not self._pending:
                self._mode = _AFTER
            return True
        if mode == _NUMBER:
            if self._number(c):
                return True
            if self._num not in _NUM_TERMINAL:
                return False
            self._mode = _AFTER
            return c in _WS or self._step(c)
        if mode in (_VALUE, _ARRAY_FIRST):
            if mode == _ARRAY_FIRST and c == "]":
                self._stack.pop()
                self._mode = _AFTER
                return True
            return self._value_start(c)
        if mode in (_OBJ_FIRST, _KEY):
            if c == '"':
                self._mode, self._in_key = _STRING, True
                return True
            if mode == _OBJ_FIRST and c == "}":
                self._stack.pop()
                self._mode = _AFTER
                return True
            return False
        if mode == _COLON:
            if c == ":":
                self._mode = _VALUE
                return True
            return False
        # _AFTER a value
        if not self._stack:
            return False
        top = self._stack[-1]
        if c == ",":
            self._mode = _KEY if top == "{" else _VALUE
            return True
        if (c == "}" and top == "{") or (c == "]" and top == "["):
            self._stack.pop()
            return True
        return False

    def _value_start(self, c: str) -> bool:
        if c == '"':
            self._mode, self._in_key = _STRING, False
        elif c == "{":
            self._stack.append("{")
            self._mode = _OBJ_FIRST
        elif c == "[":
            self._stack.append("[")
            self._mode = _ARRAY_FIRST
        elif c == "-":
            self._mode, self._num = _NUMBER, _MINUS
        elif c == "0":
            self._mode, self._num = _NUMBER, _ZERO
        elif "1" <= c <= "9":
            self._mode, self._num = _NUMBER, _INT
        elif c in _LITERALS:
            self._mode, self._pending = _LITERAL, _LITERALS[c]
        else:
            return False
        return True

    def _number(self, c: str) -> bool:
        """Advance the number sub-automaton; False if ``c`` is not part of it."""
        s, digit = self._num, "0" <= c <= "9"
        if s == _MINUS:
            nxt = _ZERO if c == "0" else _INT if digit else None
        elif s in (_ZERO, _INT):
            nxt = _INT if digit and s == _INT else _DOT if c == "." else _E if c in "eE" else None
        elif s in (_DOT, _FRAC):
            nxt = _FRAC if digit else _E if c in "eE" and s == _FRAC else None
        elif s == _E:
            nxt = _EXP if digit else _ESIGN if c in "+-" else None
        else:  # _ESIGN, _EXP
            nxt = _EXP if digit else None
        if nxt is None:
            return False
        self._num = nxt
        return True


@dataclass(frozen=True, slots=True)
class Trip:
    """Why the monitor stopped a stream."""

    cause: Cause
    detail: str


def utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


class StreamMonitor:
    """Checks each delta as it arrives; returns a Trip on the first violation."""

    def __init__(self, max_payload_bytes: int, *, json_content: bool = False) -> None:
        self.max_payload_bytes = max_payload_bytes
        self.staged_bytes = 0
        self._content = JsonPrefix() if json_content else None
        self._arguments: dict[int, JsonPrefix] = {}

    def _stage(self, text: str) -> Trip | None:
        self.staged_bytes += utf8_len(text)
        if self.staged_bytes > self.max_payload_bytes:
            return Trip(
                Cause.PAYLOAD_TOO_LARGE,
                f"staged payload reached {self.staged_bytes} bytes, over M_max={self.max_payload_bytes}",
            )
        return None

    def content(self, delta: str) -> Trip | None:
        trip = self._stage(delta)
        if trip is None and self._content is not None and not self._content.feed(delta):
            trip = Trip(
                Cause.INVALID_JSON_PREFIX, f"content is not a JSON prefix at character {self._content.failed_at}"
            )
        return trip

    def other(self, delta: str) -> Trip | None:
        """Bytes staged but not JSON-checked: refusal text, tool names and ids."""
        return self._stage(delta)

    def arguments(self, index: int, delta: str) -> Trip | None:
        trip = self._stage(delta)
        if trip is not None:
            return trip
        parser = self._arguments.get(index)
        if parser is None:
            parser = self._arguments[index] = JsonPrefix()
        if not parser.feed(delta):
            return Trip(
                Cause.INVALID_JSON_PREFIX,
                f"tool call {index} arguments stopped being a JSON prefix at character {parser.failed_at}",
            )
        return None
