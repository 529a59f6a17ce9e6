"""The response side of the contract: one Envelope per call, whatever happened.

The Status taxonomy is closed. ``orchestrator.adapters.model_client.normalize`` holds the single
table that maps raw outcomes (finish reasons, HTTP codes, transport errors,
monitor trips) onto it.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import Field

from orchestrator.contract import Frozen, ToolCall

FigureSource = Literal["server", "estimated", "absent"]


def reported(value: int, source: str) -> int | None:
    """A token count as it may be shown: None when the server sent none
    (``source`` "absent"), so that no display or export writes it as 0."""
    return None if source == "absent" else value
# Which server block the "server" figures came from: OpenAI-style ``usage``,
# llama.cpp's ``timings`` or both.
ServerBlock = Literal["usage", "timings", "usage+timings"]
# How the server counted reasoning tokens: inside ``completion_tokens``
# (OpenAI's convention), outside it (total = prompt + completion + reasoning),
# or assumed inside because no total told them apart.
ReasoningConvention = Literal["included", "excluded", "assumed_included"]


class Status(str, Enum):
    COMPLETED = "COMPLETED"
    TRUNCATED = "TRUNCATED"
    REFUSED = "REFUSED"
    TRANSPORT_FAILURE = "TRANSPORT_FAILURE"
    REJECTED = "REJECTED"
    CANCELED = "CANCELED"
    FAULTED = "FAULTED"


class Usage(Frozen):
    """Token counts. ``cached_prompt_tokens`` is a *part of* ``prompt_tokens``,
    never an addition to it, and never more. ``completion_tokens`` always
    includes ``reasoning_tokens``, whatever convention the server used
    (``reasoning_convention`` records which it was)."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_source: FigureSource = "absent"
    cached_source: FigureSource = "absent"
    completion_source: FigureSource = "absent"
    server_block: ServerBlock | None = None
    reasoning_tokens: int | None = None
    reasoning_convention: ReasoningConvention | None = None
    # The server's own cached count when it was above the prompt count and
    # ``cached_prompt_tokens`` was clamped to the prompt: kept, and its
    # presence marks the clamp. Left out of the JSON when there was none, so
    # envelopes without it keep their recorded bytes.
    cached_prompt_tokens_reported: int | None = Field(default=None, exclude_if=lambda value: value is None)

    @property
    def cached_clamped(self) -> bool:
        """The server reported more cached tokens than prompt tokens."""
        return self.cached_prompt_tokens_reported is not None

    @property
    def prefilled_tokens(self) -> int:
        """Prompt tokens the server had to compute (not served from cache)."""
        return max(0, self.prompt_tokens - self.cached_prompt_tokens)


class Timings(Frozen):
    """Seconds. TTFT is to the first content or tool-call byte; decode is
    from there to the end of the stream."""

    ttft_s: float | None = None
    decode_s: float | None = None
    total_s: float = 0.0


class ErrorDetail(Frozen):
    kind: str
    message: str


class Attempt(Frozen):
    """One HTTP attempt of a call; a call retried twice has three."""

    number: int
    status: Status
    http_status: int | None = None
    error: ErrorDetail | None = None
    duration_s: float = 0.0
    backoff_s: float = 0.0


class Payload(Frozen):
    """What the model produced. ``reasoning`` is the engine's separated
    reasoning (``reasoning_content``/``reasoning`` deltas): recorded, shown
    and exportable, never released as text nor fed back as history."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    refusal: str | None = None
    # A server's separate reasoning stream (``reasoning_content``), shown to
    # the user, never sent back. Left out of the JSON when absent, so envelopes
    # without it keep their recorded bytes.
    reasoning: str | None = Field(default=None, exclude_if=lambda value: value is None)


class TokenDelta(Frozen):
    """How the store keeps a prompt's ids: the first ``keep`` ids of the
    run's previous recorded prompt ids, then ``ids``. A prompt is mostly the
    last prompt, so a run's stored ids grow with what each turn adds, not
    with the whole history again (``store/write/token_ids.py`` writes and expands it)."""

    keep: int = Field(ge=0)
    ids: tuple[int, ...]


class Envelope(Frozen):
    """Everything one model call produced, whatever happened: its ``status``,
    the ``payload`` (held in escrow until released), usage, timings, attempts
    and the engine that answered."""

    status: Status
    payload: Payload = Payload()
    finish_reason: str | None = None
    http_status: int | None = None
    usage: Usage = Usage()
    timings: Timings = Timings()
    model: str | None = None
    system_fingerprint: str | None = None
    engine: str | None = None
    logprobs: list[Any] | None = Field(default=None, description="The engine's per-token entries, verbatim.")
    top_logprobs: int | None = Field(default=None, description="K asked for with the logprobs.")
    logprobs_mode: str | None = Field(default=None, exclude_if=lambda value: value is None, description=(
        "What the logprobs are taken from (`orchestrator.logprobs.logprobs_mode`), e.g. `raw (engine)`."))
    prompt_token_ids: tuple[int, ...] | None = None
    completion_token_ids: tuple[int, ...] | None = None
    prompt_token_ids_delta: TokenDelta | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="The prompt ids as stored: set (prompt_token_ids None) only where the reader could not expand it.")
    error: ErrorDetail | None = None
    attempts: tuple[Attempt, ...] = ()
    request_sha256: str | None = None
    payload_bytes: int = 0
    raw_response: str | None = Field(default=None, description="Raw body or SSE text, capped.")
