"""Build SSE byte streams the way different servers frame them, for the
wire tests: LF or CRLF line ends, keep-alive comments between events, JSON
spread over several ``data:`` lines, and the in-band error framings."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

Event = tuple[str, Any]  # ("data", obj | "[DONE]"), ("error_field", obj), ("event_error", obj), ("bare", obj)


@dataclass(frozen=True)
class Framing:
    name: str
    eol: str = "\n"
    keepalive: bool = False
    multiline: bool = False
    piece_bytes: int | None = None

    def __str__(self) -> str:
        return self.name


FRAMINGS = (
    Framing("plain"),
    Framing("crlf-1byte-keepalive", eol="\r\n", keepalive=True, piece_bytes=1),
    Framing("multiline-7bytes", multiline=True, piece_bytes=7),
    Framing("crlf-multiline-keepalive-3bytes", eol="\r\n", keepalive=True, multiline=True, piece_bytes=3),
)


def _lines(value: Any, multiline: bool) -> list[str]:
    if isinstance(value, str):
        return [value]
    if multiline:
        return json.dumps(value, indent=1, ensure_ascii=False).split("\n")
    return [json.dumps(value, separators=(",", ":"), ensure_ascii=False)]


def frame(events: list[Event], framing: Framing) -> bytes:
    eol, out = framing.eol, []
    if framing.keepalive:
        out.append(": keep-alive" + eol + eol)
    for kind, value in events:
        lines = _lines(value, framing.multiline)
        if kind == "data":
            out.append("".join(f"data: {line}{eol}" for line in lines))
        elif kind == "error_field":
            out.append("".join(f"error: {line}{eol}" for line in lines))
        elif kind == "event_error":
            out.append(f"event: error{eol}" + "".join(f"data: {line}{eol}" for line in lines))
        elif kind == "bare":
            out.append("".join(line + eol for line in lines))
        else:
            raise ValueError(kind)
        out.append(eol)
        if framing.keepalive:
            out.append(": ping" + eol)
    return "".join(out).encode("utf-8")


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **top: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with choice 0."""
    return {"id": "chatcmpl-wire", "object": "chat.completion.chunk", "model": "wire-model",
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **top}
