"""OpenAI-compatible wire models for ``/v1/chat/completions``.

These describe what servers *send*, so they keep unknown fields
(``extra="allow"``): vLLM, SGLang and llama.cpp add their own (``timings``,
``reasoning_content``, ``stop_reason``...) and the raw record should lose
nothing. Escrow's own models (``orchestrator.contract``) forbid extras; the
translation happens once, in ``orchestrator.adapters.model_client.normalize`` and the accumulator.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Wire(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class WirePromptDetails(Wire):
    cached_tokens: int | None = None


class WireCompletionDetails(Wire):
    reasoning_tokens: int | None = None


class WireUsage(Wire):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: WirePromptDetails | None = None
    completion_tokens_details: WireCompletionDetails | None = None


class WireTimings(Wire):
    """llama.cpp's own per-request figures: ``prompt_n`` tokens computed,
    ``cache_n`` tokens reused from the slot's KV cache."""

    prompt_n: int | None = None
    cache_n: int | None = None
    predicted_n: int | None = None


class WireError(Wire):
    message: str | None = None
    type: str | None = None
    code: int | str | None = None


class WireFunction(Wire):
    name: str | None = None
    arguments: str | None = None


class WireToolCall(Wire):
    """A complete tool call (non-streamed) or one delta of it (streamed,
    identified by ``index``; ``id`` and ``name`` usually arrive only once)."""

    index: int | None = None
    id: str | None = None
    type: str | None = None
    function: WireFunction | None = None


class WireMessage(Wire):
    """``message`` of a non-streamed choice, or ``delta`` of a streamed one."""

    role: str | None = None
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[WireToolCall] | None = None
    # Reasoning parsers: DeepSeek, SGLang and vLLM < 0.10 say ``reasoning_content``;
    # vLLM >= 0.10 and Ollama's OpenAI layer say ``reasoning``.
    reasoning_content: str | None = None
    reasoning: str | None = None


class WireLogprobs(Wire):
    content: list[Any] | None = None


class WireChoice(Wire):
    index: int = 0
    message: WireMessage | None = None
    delta: WireMessage | None = None
    finish_reason: str | None = None
    logprobs: WireLogprobs | None = None


class WireCompletion(Wire):
    """A non-streamed response body, or one streamed chunk: both have the same
    envelope (``choices``, ``usage``, ``model``...), only the choice differs."""

    id: str | None = None
    object: str | None = None
    model: str | None = None
    system_fingerprint: str | None = None
    choices: list[WireChoice] = []
    usage: WireUsage | None = None
    timings: WireTimings | None = None
    error: WireError | str | None = None


class WireErrorBody(Wire):
    """The body of an HTTP error response: ``{"error": {...}}``; some servers
    send ``{"detail": ...}`` or ``{"message": ...}`` instead."""

    error: WireError | str | None = None
    detail: Any = None
    message: str | None = None

    def text(self) -> str:
        if isinstance(self.error, WireError) and self.error.message:
            return self.error.message
        if isinstance(self.error, str):
            return self.error
        if self.message:
            return self.message
        return "" if self.detail is None else str(self.detail)
