"""Compaction: the only code allowed to rewrite history.

Two strategies, applied in order until the context fits the compaction
target: (a) elide old tool outputs, keeping a head and a tail of each; (b)
drop the oldest whole turns after the pinned prefix (system, tools, task),
leaving a marker saying how many were dropped. The newest turn is never
dropped. Each strategy that changes something yields one ``CompactionEvent``
naming the first message it changed: that is where the prefix cache breaks.
"""

from __future__ import annotations

from typing import Callable, Literal

from pydantic import Field

from orchestrator.context.counting import MessageCounter
from orchestrator.context.layout import ContextState, Entry
from orchestrator.contract import Frozen, Message

Strategy = Literal["elide_tool_outputs", "drop_oldest_turns"]
Fits = Callable[[ContextState], bool]


class CompactionPolicy(Frozen):
    target_fill: float = Field(
        default=0.75,
        gt=0.0,
        le=1.0,
        description="Compact down to this share of the budget, so the cache does not break every turn.",
    )
    keep_head_chars: int = Field(default=1200, ge=0)
    keep_tail_chars: int = Field(default=800, ge=0)
    drop_marker: str = "[{dropped} earlier turns were removed to fit the context window]"


class CompactionEvent(Frozen):
    turn: int
    strategy: Strategy
    first_changed_message: int = Field(description="Index in the request's messages of the first rewritten one.")
    messages_changed: int
    tokens_before: int = Field(description="Estimated prompt tokens (with margin) before this step.")
    tokens_after: int


def elide_text(text: str, head: int, tail: int) -> str | None:
    """Head and tail of ``text`` around a note of what was cut; None when that would not shrink it."""
    cut = len(text) - head - tail
    if cut <= 0:
        return None
    note = f"\n[... {cut} characters elided to fit the context window ...]\n"
    if len(note) >= cut:
        return None
    return text[:head] + note + text[len(text) - tail :]


def elide_tool_outputs(
    state: ContextState, *, fits: Fits, counter: MessageCounter, policy: CompactionPolicy
) -> tuple[ContextState, int]:
    """Elide elidable entries oldest first until ``fits``; returns (state, count changed)."""
    history = list(state.history)
    changed = 0
    for index, entry in enumerate(history):
        if fits(state):
            break
        if not entry.elidable or entry.elided or entry.message.content is None:
            continue
        text = elide_text(entry.message.content, policy.keep_head_chars, policy.keep_tail_chars)
        if text is None:
            continue
        message = entry.message.model_copy(update={"content": text})
        tokens = counter.message(message)
        if tokens >= entry.tokens:
            continue
        history[index] = entry.model_copy(update={"message": message, "tokens": tokens, "elided": True})
        changed += 1
        state = state.with_history(tuple(history))
    return state, changed


def drop_oldest_turns(
    state: ContextState, *, fits: Fits, counter: MessageCounter, policy: CompactionPolicy
) -> tuple[ContextState, int]:
    """Drop whole turns, oldest first, never the newest; returns (state, turns dropped)."""
    if not state.history:
        return state, 0
    newest = state.history[-1].turn
    dropped = 0
    history = state.history
    while not fits(state) and history and history[0].turn != newest:
        oldest = history[0].turn
        cut = next((i for i, e in enumerate(history) if e.turn != oldest), len(history))
        history = history[cut:]
        dropped += 1
        total = state.dropped_turns + 1
        text = policy.drop_marker.format(dropped=total)
        marker_message = Message(role="user", content=text)
        marker = Entry(message=marker_message, tokens=counter.message(marker_message), turn=-1)
        state = state.with_history(history, marker=marker, dropped_turns=total)
    return state, dropped
