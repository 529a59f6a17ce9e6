"""Incremental Server-Sent Events parser over raw bytes.

Fed whatever byte slices the socket yields, it returns complete events. It
splits on bytes before decoding, so a multi-byte UTF-8 character cut across
two network reads is never mis-decoded; a line that is not UTF-8 at all raises
``SSEError`` rather than being silently replaced. Tolerances, because real
servers differ: CRLF, CR or LF line ends, ``data:`` with or without the space,
comments and unknown fields ignored, and a final event without its blank line
is still delivered at end of stream. Two engine quirks (``orchestrator.adapters.model_client.engines``)
are read rather than dropped: an ``error:`` field (llama.cpp) becomes an event
named ``error``, and lines outside SSE framing that open with ``{`` (a bare
JSON error body) are gathered, up to the next blank line, into an event named
``bare``. A line longer than ``max_line_bytes``
raises, so a server that never sends a newline cannot grow the buffer without
bound.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.errors import EscrowError

_FIELD = re.compile(r"(data|event|id|retry|error)(:|$)")


class SSEError(EscrowError):
    """The byte stream is not valid SSE. ``kind`` is ``non_utf8`` or
    ``line_too_long``."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message, kind=kind)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: str
    event: str | None = None
    id: str | None = None


class SSEParser:
    def __init__(self, max_line_bytes: int = 1 << 20) -> None:
        self.max_line_bytes = max_line_bytes
        self._buf = bytearray()
        self._skip_lf = False
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self._bare: list[str] = []
        self.bytes_seen = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self.bytes_seen += len(chunk)
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        self._skip_lf = False
        if b"\r" in chunk:
            # A CR at the very end may be the first half of a CRLF split across reads.
            self._skip_lf = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf
        buf += chunk
        events: list[SSEEvent] = []
        start = 0
        while True:
            end = buf.find(b"\n", start)
            if end < 0:
                break
            self._line(bytes(buf[start:end]), events)
            start = end + 1
        if start:
            del buf[:start]
        if len(buf) > self.max_line_bytes:
            raise SSEError(f"SSE line longer than {self.max_line_bytes} bytes", kind="line_too_long")
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: flush a trailing line and an undelivered event."""
        events: list[SSEEvent] = []
        if self._buf:
            self._line(bytes(self._buf), events)
            self._buf.clear()
        self._dispatch(events)
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not raw:
            self._dispatch(events)
            return
        if raw[:1] == b":":
            return
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SSEError(f"SSE line is not UTF-8 at byte {exc.start}: {raw[:64]!r}", kind="non_utf8") from exc
        field = _FIELD.match(line) is not None
        if line[:1] == "{" or (self._bare and not field):
            self._bare.append(line)
            return
        if self._bare:  # a field line ends bare JSON even without a blank line
            events.append(SSEEvent("\n".join(self._bare), "bare", self._id))
            self._bare = []
        name, sep, value = line.partition(":")
        if sep and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            self._id = value
        elif name == "error":
            self._data.append(value)
            self._event = "error"

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if self._data:
            events.append(SSEEvent("\n".join(self._data), self._event, self._id))
        if self._bare:
            events.append(SSEEvent("\n".join(self._bare), "bare", self._id))
        self._data = []
        self._bare = []
        self._event = None
