"""The per-run context: append what each turn produced, render the next request.

``Context`` is the stateful shell the turn loop holds; the decisions (layout,
budget arithmetic, compaction) live in the pure modules it calls. Each turn
tokenizes only new messages: counts are kept in the state and memoised by
content hash.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import Field

from orchestrator.context.budget import Budget, Margin
from orchestrator.context.calibration import CalibrationEvent, calibrate
from orchestrator.context.compaction import (
    CompactionEvent,
    CompactionPolicy,
    Strategy,
    drop_oldest_turns,
    elide_tool_outputs,
)
from orchestrator.context.counting import MessageCounter, TemplateOverhead
from orchestrator.context.layout import ContextState, Entry, TailFormat, first_difference, normalize_tools
from orchestrator.context.tokenizer import TokenCounter
from orchestrator.contract import Frozen, Message, ModelRequest, Role, Sampling, ToolSpec
from orchestrator.errors import BudgetExhausted, ContractError


class RenderedContext(Frozen):
    """One turn's prompt: what goes into a ModelRequest, and what it cost to fit."""

    turn: int
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    stable_messages: int = Field(description="Messages before the volatile tail; the tail is the rest.")
    raw_tokens: int = Field(description="Our token count, template allowance included, no margin.")
    prompt_tokens_estimate: int = Field(description="raw_tokens with the safety margin: the S checked.")
    budget: Budget
    margin: Margin
    tokenizer: str
    compactions: tuple[CompactionEvent, ...] = ()
    first_changed_message: int | None = Field(
        default=None, description="Where compaction rewrote the previously sent messages, if it did."
    )

    def build_request(self, *, model: str, max_tokens: int | None = None, **fields: Any) -> ModelRequest:
        """A ModelRequest with these messages and tools; ``max_tokens`` defaults to K_max."""
        k = self.budget.k_max if max_tokens is None else max_tokens
        if k > self.budget.k_max:
            raise ContractError(
                f"max_tokens {k} exceeds the K_max {self.budget.k_max} this context was budgeted for",
                max_tokens=k,
                k_max=self.budget.k_max,
            )
        fields.setdefault("sampling", Sampling())
        return ModelRequest(model=model, messages=self.messages, tools=self.tools, max_tokens=k, **fields)


class ContextAssembler:
    """Segmented, budgeted, prefix-stable context of one run."""

    def __init__(
        self,
        *,
        system: str,
        task: str,
        tools: Sequence[ToolSpec],
        budget: Budget,
        counter: TokenCounter,
        margin: Margin | None = None,
        policy: CompactionPolicy | None = None,
        tail: TailFormat | None = TailFormat(),
        overhead: TemplateOverhead | None = None,
        system_role: Role = "system",
    ) -> None:
        """``system_role="user"`` for chat templates that have no system turn: llama.cpp's
        "gemma" format silently drops system (and tool) messages."""
        self.budget = budget
        self.margin = margin or Margin()
        self.policy = policy or CompactionPolicy()
        self.tail = tail
        self.counts = MessageCounter(counter, overhead)
        normalized = normalize_tools(tools)
        self._state = ContextState(
            tools=normalized,
            tools_tokens=self.counts.tools(normalized),
            system=self._entry(Message(role=system_role, content=system), turn=-1),
            task=self._entry(Message(role="user", content=task), turn=-1),
        )
        self._tail_reserve = self.counts.message(tail.reserve_message()) if tail is not None else 0
        # The last rendered state and its messages: appending extends them, so
        # a long run does not re-collect its whole history every turn.
        self._rendered: tuple[ContextState, tuple[Message, ...]] | None = None

    @property
    def state(self) -> ContextState:
        return self._state

    def _entry(self, message: Message, *, turn: int, elidable: bool = False) -> Entry:
        return Entry(message=message, tokens=self.counts.message(message), turn=turn, elidable=elidable)

    def append(self, messages: Sequence[Message], *, turn: int, elidable: Sequence[bool] | None = None) -> None:
        """Add one turn's messages (the assistant's and its tool results) to history.
        Tool-role messages are elidable by default; pass ``elidable`` to mark
        user-role observations too."""
        if elidable is not None and len(elidable) != len(messages):
            raise ContractError("elidable must give one flag per message", messages=len(messages))
        if self._state.history and turn < self._state.history[-1].turn:
            raise ContractError("history is append-only: turns must not go backwards", turn=turn)
        flags = elidable if elidable is not None else [m.role == "tool" for m in messages]
        entries = [self._entry(m, turn=turn, elidable=f) for m, f in zip(messages, flags, strict=False)]
        before = self._state
        self._state = before.appended(entries)
        if self._rendered is not None and self._rendered[0] is before:
            self._rendered = (self._state, self._rendered[1] + tuple(e.message for e in entries))

    def _messages(self, state: ContextState) -> tuple[Message, ...]:
        if self._rendered is None or self._rendered[0] is not state:
            self._rendered = (state, state.messages())
        return self._rendered[1]

    def _raw(self, state: ContextState, tail_tokens: int) -> int:
        return self.counts.request_overhead() + state.tools_tokens + state.message_tokens + tail_tokens

    def estimate(self, state: ContextState | None = None, tail_tokens: int | None = None) -> int:
        """Estimated prompt tokens S (with margin) of ``state`` plus a tail."""
        tail = self._tail_reserve if tail_tokens is None else tail_tokens
        return self.margin.apply(self._raw(state or self._state, tail))

    def render(self, *, turn: int, turns_left: int | None = None) -> RenderedContext:
        """The prompt for ``turn``; compacts history first when it would not fit.
        Raises BudgetExhausted (limit="context") when even compaction cannot fit it."""
        available = self.budget.available
        before = state = self._state
        events: list[CompactionEvent] = []
        if self.estimate(state) > available:
            state, events = self._compact(state, turn=turn, target=int(available * self.policy.target_fill))
        stable = self._messages(state)
        tail_messages: tuple[Message, ...] = ()
        tail_tokens = 0
        if self.tail is not None:
            tail_message = self.tail.message(turns_left=turns_left, tokens_left=available - self.estimate(state))
            tail_tokens = max(self.counts.message(tail_message), self._tail_reserve)
            tail_messages = (tail_message,)
        raw = self._raw(state, tail_tokens)
        estimate = self.margin.apply(raw)
        if estimate > available:
            raise BudgetExhausted(
                f"context does not fit even after compaction: about {estimate} prompt tokens "
                f"for {available} available (window {self.budget.s_max} - output {self.budget.k_max})",
                limit="context",
                turn=turn,
                estimate=estimate,
                available=available,
                compactions=[e.model_dump() for e in events],
            )
        self._state = state
        return RenderedContext(
            turn=turn,
            messages=stable + tail_messages,
            tools=state.tools,
            stable_messages=len(stable),
            raw_tokens=raw,
            prompt_tokens_estimate=estimate,
            budget=self.budget,
            margin=self.margin,
            tokenizer=self.counts.counter.name,
            compactions=tuple(events),
            first_changed_message=first_difference(before.messages(), stable) if events else None,
        )

    def _compact(self, state: ContextState, *, turn: int, target: int) -> tuple[ContextState, list[CompactionEvent]]:
        def fits(candidate: ContextState) -> bool:
            return self.estimate(candidate) <= target

        events: list[CompactionEvent] = []
        steps: tuple[tuple[Strategy, Callable[..., tuple[ContextState, int]]], ...] = (
            ("elide_tool_outputs", elide_tool_outputs),
            ("drop_oldest_turns", drop_oldest_turns),
        )
        for strategy, step in steps:
            new, changed = step(state, fits=fits, counter=self.counts, policy=self.policy)
            if changed:
                first_changed = first_difference(state.messages(), new.messages())
                assert first_changed is not None  # a step that changed messages left a difference
                events.append(
                    CompactionEvent(
                        turn=turn,
                        strategy=strategy,
                        first_changed_message=first_changed,
                        messages_changed=changed,
                        tokens_before=self.estimate(state),
                        tokens_after=self.estimate(new),
                    )
                )
                state = new
        return state, events

    def calibrate(self, rendered: RenderedContext, *, reported_prompt_tokens: int) -> CalibrationEvent:
        """Compare a sent request's estimate with the server's prompt_tokens; may raise the margin."""
        event = calibrate(
            turn=rendered.turn,
            tokenizer=rendered.tokenizer,
            estimated_raw=rendered.raw_tokens,
            reported=reported_prompt_tokens,
            margin=self.margin,
        )
        self.margin = event.margin_after
        return event
