"""Capped capture of a byte stream: keep a head and a tail, count every byte
and hash all of it, so a flood costs bounded memory but is still described
exactly (size and sha256 of what was really produced)."""

from __future__ import annotations

import hashlib

from orchestrator.contract import Captured


class StreamCapture:
    """Accumulates one stream under a byte cap (half head, half tail)."""

    def __init__(self, cap: int) -> None:
        self._head_cap = cap - cap // 2
        self._tail_cap = cap // 2
        self._head = bytearray()
        self._tail = bytearray()
        self._hash = hashlib.sha256()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self._hash.update(chunk)
        self.total += len(chunk)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self._tail_cap:
            self._tail += chunk
            if len(self._tail) > self._tail_cap:
                del self._tail[: len(self._tail) - self._tail_cap]

    def result(self) -> Captured:
        truncated = self.total > len(self._head) + len(self._tail)
        head = bytes(self._head) if truncated else bytes(self._head + self._tail)
        return Captured(
            head=head.decode("utf-8", errors="replace"),
            tail=bytes(self._tail).decode("utf-8", errors="replace") if truncated else "",
            total_bytes=self.total,
            sha256=self._hash.hexdigest(),
            truncated=truncated,
        )


def capture_bytes(data: bytes, cap: int) -> Captured:
    capture = StreamCapture(cap)
    capture.feed(data)
    return capture.result()


class BytesCapture(StreamCapture):
    """A capture that also keeps every byte, up to ``limit`` (for archives)."""

    def __init__(self, limit: int) -> None:
        super().__init__(256)
        self.limit = limit
        self.data = bytearray()
        self.overflowed = False

    def feed(self, chunk: bytes) -> None:
        super().feed(chunk)
        if len(self.data) + len(chunk) > self.limit:
            self.overflowed = True
        else:
            self.data += chunk
