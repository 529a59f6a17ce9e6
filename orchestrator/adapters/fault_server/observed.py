"""What the fault server observed, for tests to assert on."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RecordedRequest:
    index: int
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float

    @property
    def json(self) -> Any:
        """The parsed body; None if it was not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


@dataclass
class StreamRecord:
    """One streamed response as the server sent it. ``sent_at[i]`` is the
    monotonic time payload chunk i left the server."""

    request_index: int
    planned_chunks: int
    sent_at: list[float] = field(default_factory=list)
    all_sent: bool = False
    hung_up_by_server: bool = False
    disconnected_at: float | None = None

    @property
    def chunks_sent(self) -> int:
        return len(self.sent_at)


@dataclass(frozen=True)
class Disconnect:
    """The client hung up on a response before the server had sent all of it."""

    request_index: int
    chunks_sent: int
    planned_chunks: int
    at: float
