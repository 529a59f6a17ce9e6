"""Per-message token counts, cached by content hash.

The chat template adds tokens around every message (role markers, turn
delimiters) that no text tokenizer sees; ``TemplateOverhead`` adds a
conservative allowance for them. Counts are memoised by the texts they are
made of, so a message is tokenized once per run however many turns re-send it.
"""

from __future__ import annotations

from typing import Sequence

from pydantic import Field

from orchestrator.canonical import canonical_json
from orchestrator.context.tokenizer import TokenCounter
from orchestrator.contract import Frozen, Message, ToolSpec


class TemplateOverhead(Frozen):
    """Tokens the chat template adds, over-estimated on purpose: calibration
    can only correct an under-estimate after the fact."""

    per_message: int = Field(default=8, ge=0)
    per_tool_call: int = Field(default=12, ge=0)
    tools_block: int = Field(default=24, ge=0)
    per_request: int = Field(default=8, ge=0, description="BOS and the generation prompt.")


class MessageCounter:
    """Token counts of messages and tool lists through one ``TokenCounter``."""

    def __init__(self, counter: TokenCounter, overhead: TemplateOverhead | None = None) -> None:
        self.counter = counter
        self.overhead = overhead or TemplateOverhead()
        self._cache: dict[tuple[object, ...], int] = {}
        self.hits = 0
        self.misses = 0

    def message(self, message: Message) -> int:
        # Keyed by exactly what _count_uncached reads: hashing these strings
        # costs far less than serialising the message to hash it.
        key = (message.content, tuple((c.id, c.name, c.arguments) for c in message.tool_calls),
               message.tool_call_id, message.name)
        cached = self._cache.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        tokens = self._count_uncached(message)
        self._cache[key] = tokens
        return tokens

    def _count_uncached(self, message: Message) -> int:
        count = self.counter.count
        tokens = self.overhead.per_message + count(message.content or "")
        for call in message.tool_calls:
            tokens += self.overhead.per_tool_call + count(call.id) + count(call.name) + count(call.arguments)
        for extra in (message.tool_call_id, message.name):
            if extra is not None:
                tokens += count(extra)
        return tokens

    def tools(self, tools: Sequence[ToolSpec]) -> int:
        if not tools:
            return 0
        return self.overhead.tools_block + self.counter.count(canonical_json([t.to_wire() for t in tools]))

    def request_overhead(self) -> int:
        return self.overhead.per_request
