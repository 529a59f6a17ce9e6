"""What the fault server plays: one scenario per request, in script order.

Scenarios are frozen pydantic models, so a whole script (an agent trajectory,
or a fault drill) is plain JSON and loads with ``Script.model_validate_json``.
``Fault`` builds the common faults in one line each.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal, Union

from pydantic import BeforeValidator, Field, PlainSerializer

from orchestrator.contract import Frozen


def _from_base64(value: Any) -> Any:
    return base64.b64decode(value) if isinstance(value, str) else value


# Raw bytes (possibly not UTF-8) travel through JSON scripts as base64.
Base64Bytes = Annotated[
    bytes,
    BeforeValidator(_from_base64),
    PlainSerializer(lambda v: base64.b64encode(v).decode("ascii"), return_type=str),
]


class ScriptedToolCall(Frozen):
    name: str
    arguments: str = "{}"
    id: str | None = None


class StreamFault(Frozen):
    """Something the stream does after ``at_chunk`` payload chunks were sent.

    ``stall``: pause ``seconds``; ``disconnect``: drop the connection;
    ``malformed``: send an SSE event whose data is not JSON; ``error``: send an
    ``{"error": ...}`` chunk with ``message``; ``raw``: send ``data`` bytes as is.
    """

    at_chunk: int = Field(ge=0)
    action: Literal["stall", "disconnect", "malformed", "error", "raw"]
    seconds: float = 0.0
    message: str = "engine error"
    data: Base64Bytes = b""


class Reply(Frozen):
    """A well-formed completion, streamed or not as the request asks.

    Text and each tool call's arguments are cut into ``chunk_chars``-character
    chunks, one per SSE event ("token"); ``tokens_per_s`` paces them.
    ``finish_reason`` defaults to "tool_calls" when there are tool calls and
    "stop" otherwise. ``usage="auto"`` counts words of the prompt and chunks of
    the answer; ``"none"`` omits usage (as llama-cpp-python does when streaming).
    """

    kind: Literal["reply"] = "reply"
    text: str = ""
    reasoning: str = Field(
        default="", description="Sent as reasoning_content before the text, as vLLM and llama.cpp do."
    )
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    refusal: str | None = None
    finish_reason: str | None = None
    chunk_chars: int = Field(default=4, ge=1)
    tokens_per_s: float | None = Field(default=None, gt=0)
    delay_s: float = Field(default=0.0, ge=0, description="Stall before the response headers.")
    prefill_ids_per_s: float | None = Field(default=None, gt=0, description=(
        "vLLM's /v1/completions over a prompt of ids: the engine reads prompts at this many ids a second, "
        "in all (one clock for every request in flight), before it answers (a simulated teacher's prefill)."))
    released_by: str | None = Field(default=None, description=(
        "With delay_s: the stall ends early once the server's release(NAME) is called "
        "(a test holds replies until what it waits for has happened, then lets them go)."))
    usage: Literal["auto", "none"] | dict[str, Any] = "auto"
    cached_tokens: int | None = None
    model: str | None = None
    system_fingerprint: str | None = "fp_escrow_fault"
    headers: dict[str, str] = Field(default_factory=dict)
    faults: tuple[StreamFault, ...] = ()
    send_done: bool = True
    # Token ids, sent in the fields of the engine ``token_ids_as`` names:
    # vLLM's top-level ``prompt_token_ids`` and each choice's ``token_ids``
    # (``return_token_ids``); llama.cpp's ``id`` on each logprob entry (its
    # chat endpoint sends no prompt ids). Elements are Any so that a script
    # can send what no engine should (a string, a float); None sends no field.
    prompt_token_ids: list[Any] | None = None
    completion_token_ids: list[Any] | None = None
    token_ids_as: Literal["vllm", "llama.cpp"] = "vllm"

    @property
    def effective_finish_reason(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"


class HttpError(Frozen):
    """A non-2xx response with an OpenAI-style error body (or ``body`` verbatim)."""

    kind: Literal["http_error"] = "http_error"
    status: int = Field(ge=300, le=599)
    message: str = "error"
    error_type: str = "server_error"
    retry_after: float | str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    body: str | None = None
    delay_s: float = Field(default=0.0, ge=0)


class RawResponse(Frozen):
    """Bytes sent exactly as given (base64 in JSON scripts): bad JSON, non-UTF-8,
    a captured SSE stream... With ``piece_bytes`` the body goes out in writes of
    that many bytes (down to 1), ``pause_s`` apart, without a content-length,
    so chunk boundaries fall wherever a test wants them."""

    kind: Literal["raw"] = "raw"
    status: int = 200
    content_type: str = "application/json"
    body: Base64Bytes = b""
    piece_bytes: int | None = Field(default=None, gt=0)
    pause_s: float = Field(default=0.0, ge=0)


class Hangup(Frozen):
    """Close the connection without sending a single byte."""

    kind: Literal["hangup"] = "hangup"


class Oversized(Frozen):
    """A valid completion whose content is ``size_bytes`` of "x", generated lazily."""

    kind: Literal["oversized"] = "oversized"
    size_bytes: int = Field(gt=0)
    piece_bytes: int = Field(default=64 * 1024, gt=0)


Scenario = Annotated[Union[Reply, HttpError, RawResponse, Hangup, Oversized], Field(discriminator="kind")]


class Script(Frozen):
    """A JSON script file: ``{"steps": [...], "cycle": false}``."""

    steps: tuple[Scenario, ...]
    cycle: bool = False


OVERFLOW_MESSAGE = (
    "This model's maximum context length is 2048 tokens. However, you requested 4096 tokens "
    "(3584 in the messages, 512 in the completion). Please reduce the length of the messages or completion."
)


class Fault:
    """One-line constructors for the faults the client must survive."""

    @staticmethod
    def http(status: int, *, retry_after: float | str | None = None, message: str | None = None) -> HttpError:
        return HttpError(status=status, retry_after=retry_after, message=message or f"injected HTTP {status}")

    @staticmethod
    def rate_limited(retry_after: float = 1) -> HttpError:
        return HttpError(status=429, retry_after=retry_after, message="rate limited", error_type="rate_limit_error")

    @staticmethod
    def context_overflow() -> HttpError:
        return HttpError(status=400, message=OVERFLOW_MESSAGE, error_type="invalid_request_error")

    @staticmethod
    def truncated(text: str = "rm -rf /tmp/scratch") -> Reply:
        return Reply(text=text, finish_reason="length")

    @staticmethod
    def refusal(text: str = "I can't help with that.") -> Reply:
        return Reply(refusal=text)

    @staticmethod
    def content_filter(text: str = "") -> Reply:
        return Reply(text=text, finish_reason="content_filter")

    @staticmethod
    def stall(seconds: float, *, after_chunk: int = 1, text: str = "stalled answer") -> Reply:
        return Reply(text=text, faults=(StreamFault(at_chunk=after_chunk, action="stall", seconds=seconds),))

    @staticmethod
    def disconnect(after_chunk: int = 2, *, text: str = "this answer is cut off midway") -> Reply:
        return Reply(text=text, faults=(StreamFault(at_chunk=after_chunk, action="disconnect"),))

    @staticmethod
    def malformed_chunk(after_chunk: int = 1, *, text: str = "a fine start") -> Reply:
        return Reply(text=text, faults=(StreamFault(at_chunk=after_chunk, action="malformed"),))

    @staticmethod
    def error_mid_stream(after_chunk: int = 1, *, message: str = "CUDA error: out of memory") -> Reply:
        return Reply(
            text="partial output", faults=(StreamFault(at_chunk=after_chunk, action="error", message=message),)
        )

    @staticmethod
    def invalid_tool_arguments(
        valid: str = '{"path": "a.py"}', junk: str = '}, "x": 1', name: str = "read_file"
    ) -> Reply:
        """Tool-call arguments that are a valid JSON value, then keep going."""
        return Reply(tool_calls=(ScriptedToolCall(name=name, arguments=valid + junk),), chunk_chars=1)

    @staticmethod
    def oversized(size_bytes: int) -> Oversized:
        return Oversized(size_bytes=size_bytes)

    @staticmethod
    def raw(body: bytes, *, status: int = 200, content_type: str = "application/json",
            piece_bytes: int | None = None, pause_s: float = 0.0) -> RawResponse:
        return RawResponse(
            status=status, content_type=content_type, body=body, piece_bytes=piece_bytes, pause_s=pause_s
        )

    @staticmethod
    def raw_stream(body: bytes, *, piece_bytes: int | None = None, pause_s: float = 0.0) -> RawResponse:
        """Scripted bytes served as a 200 ``text/event-stream``."""
        return RawResponse(content_type="text/event-stream", body=body, piece_bytes=piece_bytes, pause_s=pause_s)

    @staticmethod
    def hangup() -> Hangup:
        return Hangup()
