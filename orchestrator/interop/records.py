"""What a parser makes of a source trajectory: frozen, typed records.

A trajectory is its flat message list in order, as the source has it. An
assistant message that a model produced carries a ``SourceCall`` (its usage,
model, finish reason and timing, each None where the source lacks it); a
message that reports a tool's result carries a ``SourceObservation``. The
store adapter turns each call into a turn and each observation into a tool
execution; nothing here is invented: None means the source did not say.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from orchestrator.contract import Frozen, Message, ToolCall

IMPORT_MODE = "import"  # runs.mode of an imported run

FORMATS: tuple[str, ...] = ("swe-agent", "mini-swe-agent", "openhands", "inspect", "atif")


class SourceUsage(Frozen):
    """Token figures of one call as the source reports them, already in
    Escrow's convention: ``cached_tokens`` is a part of ``prompt_tokens``."""

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None


class SourceCall(Frozen):
    model: str | None = None
    usage: SourceUsage = SourceUsage()
    finish_reason: str | None = None
    reasoning: str | None = None
    at: float | None = None
    duration_s: float | None = None
    logprobs: list[Any] | None = None


class SourceObservation(Frozen):
    """A tool result. ``tool_call_id`` ties it to a call of the assistant
    message before it; ``action`` is the text command of formats whose
    actions are not tool calls (SWE-agent, mini-swe-agent)."""

    tool_name: str
    tool_call_id: str | None = None
    action: str | None = None
    exit_code: int | None = None
    duration_s: float | None = None
    error: str | None = None
    at: float | None = None


class SourceMessage(Frozen):
    """``conversation`` numbers the message lists of a trajectory: a call's
    request is the messages of its own conversation before it (an Inspect
    scorer's call starts a new one)."""

    message: Message
    call: SourceCall | None = None
    observation: SourceObservation | None = None
    conversation: int = 0


class SourceTrajectory(Frozen):
    """One trajectory of a source file (an Inspect log holds one per sample)."""

    format: str
    version: str
    source_id: str | None = None
    task: str
    model: str | None = None
    messages: tuple[SourceMessage, ...]
    info: dict[str, Any] = Field(default_factory=dict)
    run_usage: SourceUsage | None = None
    """The source's own run-level totals (SWE-agent and mini-swe-agent
    ``model_stats``, ATIF ``final_metrics``, Inspect ``model_usage``,
    OpenHands' accumulated metrics); None where it gives none."""
    started_at: float | None = None
    ended_at: float | None = None
    """When the source says the trajectory ran (Unix seconds); None: it does not say."""

    @property
    def calls(self) -> int:
        return sum(1 for m in self.messages if m.call is not None)

    def run_level_counted(self) -> SourceUsage | None:
        """The run-level figures that count in the run's totals: each one no
        call gives (per call where the source has it, else run-level). The
        cached part counts only with the prompt it is a part of."""
        if self.run_usage is None:
            return None
        usages = [m.call.usage for m in self.messages if m.call is not None]

        def fill(name: str) -> Any:
            return None if any(getattr(u, name) is not None for u in usages) else getattr(self.run_usage, name)

        counted = SourceUsage(prompt_tokens=fill("prompt_tokens"), completion_tokens=fill("completion_tokens"),
                              cost_usd=fill("cost_usd"))
        if counted.prompt_tokens is not None:
            counted = counted.model_copy(update={"cached_tokens": self.run_usage.cached_tokens})
        return counted if any(v is not None for v in counted.model_dump().values()) else None


def call_message(
    content: str | None, tool_calls: tuple[ToolCall, ...] = (), conversation: int = 0, **call: Any
) -> SourceMessage:
    return SourceMessage(
        message=Message(role="assistant", content=content, tool_calls=tool_calls),
        call=SourceCall(**call),
        conversation=conversation,
    )


def plain(role: str, content: str | None, conversation: int = 0, **fields: Any) -> SourceMessage:
    # The role comes from the source file: validated here like every other field.
    message = Message.model_validate({"role": role, "content": content, **fields})
    return SourceMessage(message=message, conversation=conversation)
