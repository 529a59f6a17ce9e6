"""The segmented context and its prefix-stable rendering.

Segments, in request order::

    tools     ToolSpecs, keys sorted, tools sorted by name  (pinned)
    [0]       system prompt                                 (pinned)
    [1]       task                                          (pinned)
    [2]       drop marker, only after turns were dropped     (rewritten by compaction only)
    [..]      history, append-only, grouped by turn
    [-1]      volatile tail, a final user message            (replaced every turn)

Everything before the tail is a pure function of the state, so rendering turn
t+1 repeats turn t's messages byte for byte and only the tail (the one
volatile record, always after the newest message) is replaced.
"""

from __future__ import annotations

import json
import re
from operator import attrgetter
from typing import Sequence

from pydantic import Field

from orchestrator.canonical import canonical_json
from orchestrator.contract import Frozen, Message, Role, ToolSpec


class Entry(Frozen):
    """One message of the context with its cached token count."""

    message: Message
    tokens: int = Field(ge=0)
    turn: int
    elidable: bool = False
    elided: bool = False


class TailFormat(Frozen):
    """The volatile tail; ``{turns_left}`` and ``{tokens_left}`` are filled per turn."""

    template: str = "[turns left: {turns_left}; context tokens left: {tokens_left}]"
    role: Role = "user"

    def is_tail(self, message: Message) -> bool:
        """Whether ``message`` is a tail this format wrote (a dataset of the
        conversation leaves it out: it is the loop's, not the model's)."""
        if message.role != self.role or not isinstance(message.content, str):
            return False
        pattern = re.escape(self.template).replace(r"\{turns_left\}", r"(?:\d+|unlimited)")
        return re.fullmatch(pattern.replace(r"\{tokens_left\}", r"\d+"), message.content) is not None

    def text(self, *, turns_left: int | None, tokens_left: int) -> str:
        shown = "unlimited" if turns_left is None else turns_left
        return self.template.format(turns_left=shown, tokens_left=max(0, tokens_left))

    def message(self, *, turns_left: int | None, tokens_left: int) -> Message:
        return Message(role=self.role, content=self.text(turns_left=turns_left, tokens_left=tokens_left))

    def reserve_message(self) -> Message:
        """The widest tail we expect: its count is reserved before the real one is known."""
        return self.message(turns_left=999_999, tokens_left=999_999_999)


# Rendering a 200-message history each turn: map(attrgetter) runs at C speed.
_MESSAGE = attrgetter("message")

class ContextState(Frozen):
    """Everything a request is rendered from, apart from the tail."""

    tools: tuple[ToolSpec, ...]
    tools_tokens: int
    system: Entry
    task: Entry
    marker: Entry | None = None
    dropped_turns: int = 0
    history: tuple[Entry, ...] = ()
    history_tokens: int = 0

    def entries(self) -> tuple[Entry, ...]:
        pinned = (self.system, self.task) + ((self.marker,) if self.marker is not None else ())
        return pinned + self.history

    def messages(self) -> tuple[Message, ...]:
        return tuple(map(_MESSAGE, self.entries()))

    @property
    def history_offset(self) -> int:
        """Index of the first history message in the rendered request."""
        return 3 if self.marker is not None else 2

    @property
    def message_tokens(self) -> int:
        marker = self.marker.tokens if self.marker is not None else 0
        return self.system.tokens + self.task.tokens + marker + self.history_tokens

    def appended(self, entries: Sequence[Entry]) -> "ContextState":
        # model_copy skips re-validating the whole history: appending stays O(new).
        return self.model_copy(
            update={
                "history": self.history + tuple(entries),
                "history_tokens": self.history_tokens + sum(e.tokens for e in entries),
            }
        )

    def with_history(self, history: tuple[Entry, ...], **update: object) -> "ContextState":
        return self.model_copy(
            update={"history": history, "history_tokens": sum(e.tokens for e in history), **update}
        )


def normalize_tools(tools: Sequence[ToolSpec]) -> tuple[ToolSpec, ...]:
    """Tools in a stable order with parameter keys sorted, so their JSON is the
    same bytes whatever order the caller built them in."""
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate tool names in {names}")
    return tuple(
        ToolSpec(name=t.name, description=t.description, parameters=json.loads(canonical_json(t.parameters)))
        for t in sorted(tools, key=lambda t: t.name)
    )


def first_difference(old: Sequence[Message], new: Sequence[Message]) -> int | None:
    """Index of the first message that differs (or exists in only one list)."""
    for index, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return index
    return None if len(old) == len(new) else min(len(old), len(new))
