"""Prefix-stability report over the requests of a run.

A prefix cache sees the prompt the chat template renders: tools, then the
messages in order. So the serialization compared here is a sequence of
records, the tools list first and then one record per message, each its
canonical JSON plus a newline. (A request's canonical JSON as a whole sorts
keys, which puts "tools" after "messages"; that order means nothing to a
cache.) For each request the report gives the bytes shared with the previous
one and, where they part, the record in which they part.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from pydantic import Field

from orchestrator.canonical import canonical_json
from orchestrator.contract import Frozen, ModelRequest


class PromptBytes(Frozen):
    """A request's prompt as ordered records; the last ``tail_messages`` are volatile."""

    records: tuple[str, ...] = Field(description="records[0] is the tools list, then one per message.")
    tail_messages: int = Field(default=0, ge=0)

    @classmethod
    def from_wire_body(cls, body: dict[str, Any], *, tail_messages: int = 0) -> "PromptBytes":
        tools = canonical_json(body.get("tools") or []) + "\n"
        return cls(
            records=(tools, *(canonical_json(m) + "\n" for m in body["messages"])),
            tail_messages=tail_messages,
        )

    @classmethod
    def from_request(cls, request: ModelRequest, *, tail_messages: int = 0) -> "PromptBytes":
        return cls.from_wire_body(request.wire_body(), tail_messages=tail_messages)

    @property
    def total_bytes(self) -> int:
        return sum(len(r.encode("utf-8")) for r in self.records)

    @property
    def stable_bytes(self) -> int:
        stable = self.records[: len(self.records) - self.tail_messages]
        return sum(len(r.encode("utf-8")) for r in stable)


class TurnPrefix(Frozen):
    index: int = Field(description="Position of the request in the run.")
    total_bytes: int
    shared_bytes: int = Field(description="Bytes at the start shared with the previous request.")
    break_offset: int | None = Field(description="Byte where it parts from the previous one; None if it extends it.")
    break_in: str | None = Field(description='"tools", "message" or None.')
    break_message: int | None = Field(description="Index of the message in which it parts from the previous one.")
    extends_stable: bool = Field(description="Shares all of the previous request apart from its volatile tail.")


class PrefixReport(Frozen):
    turns: tuple[TurnPrefix, ...]

    @property
    def shared_share(self) -> float:
        """Share of all prompt bytes that repeat the previous request's start."""
        total = sum(t.total_bytes for t in self.turns)
        return sum(t.shared_bytes for t in self.turns) / total if total else 0.0


def _common_prefix(prev: PromptBytes, cur: PromptBytes) -> tuple[int, int | None]:
    """(shared bytes, index of the first record that differs or None)."""
    shared = 0
    for index, (a, b) in enumerate(zip(prev.records, cur.records, strict=False)):
        if a == b:
            shared += len(a.encode("utf-8"))
            continue
        common = os.path.commonprefix([a.encode("utf-8"), b.encode("utf-8")])
        return shared + len(common), index
    if len(prev.records) > len(cur.records):
        return shared, len(cur.records)
    return shared, None


def prefix_report(prompts: Sequence[PromptBytes]) -> PrefixReport:
    turns = []
    for index, cur in enumerate(prompts):
        if index == 0:
            turns.append(
                TurnPrefix(index=0, total_bytes=cur.total_bytes, shared_bytes=0, break_offset=None,
                           break_in=None, break_message=None, extends_stable=True)
            )
            continue
        prev = prompts[index - 1]
        shared, record = _common_prefix(prev, cur)
        broke = shared < prev.total_bytes
        turns.append(
            TurnPrefix(
                index=index,
                total_bytes=cur.total_bytes,
                shared_bytes=shared,
                break_offset=shared if broke else None,
                break_in=None if record is None else ("tools" if record == 0 else "message"),
                break_message=None if record is None or record == 0 else record - 1,
                extends_stable=shared >= prev.stable_bytes,
            )
        )
    return PrefixReport(turns=tuple(turns))
