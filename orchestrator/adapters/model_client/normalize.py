"""The one mapping from raw call outcomes to the closed ``Status`` taxonomy.

Every way a call can end is first named as a ``Cause`` (a finish reason, an
HTTP code class, a transport error, a monitor trip...). ``TABLE`` maps each
cause to exactly one Status and says which raw signal it stands for; the
client never decides a status anywhere else. ``docs/STATUS.md`` renders this
table (a test keeps the two equal). Only TRANSPORT_FAILURE is ever retried.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import NamedTuple

from orchestrator.envelope import Status


class Cause(str, Enum):
    FINISH_STOP = "finish_stop"
    FINISH_TOOL_CALLS = "finish_tool_calls"
    FINISH_LENGTH = "finish_length"
    FINISH_CONTENT_FILTER = "finish_content_filter"
    REFUSAL = "refusal"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"
    CONNECT_ERROR = "connect_error"
    READ_ERROR = "read_error"
    DEADLINE = "deadline"
    CIRCUIT_OPEN = "circuit_open"
    INVALID_JSON_PREFIX = "invalid_json_prefix"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    EXTERNAL_CANCEL = "external_cancel"
    ENGINE_ERROR = "engine_error"
    CONTEXT_OVERFLOW = "context_overflow"
    STREAM_ERROR = "stream_error"
    HTTP_ERROR = "http_error"
    MALFORMED_PROTOCOL = "malformed_protocol"
    NON_UTF8 = "non_utf8"
    UNKNOWN_FINISH_REASON = "unknown_finish_reason"
    INTERNAL_ERROR = "internal_error"


class Row(NamedTuple):
    status: Status
    signal: str


S = Status
TABLE: dict[Cause, Row] = {
    Cause.FINISH_STOP: Row(S.COMPLETED, '`finish_reason` "stop" (natural end or a stop sequence)'),
    Cause.FINISH_TOOL_CALLS: Row(S.COMPLETED, '`finish_reason` "tool_calls" (or legacy "function_call")'),
    Cause.FINISH_LENGTH: Row(S.TRUNCATED, '`finish_reason` "length": K_max or the context window was hit'),
    Cause.FINISH_CONTENT_FILTER: Row(S.REFUSED, '`finish_reason` "content_filter"'),
    Cause.REFUSAL: Row(S.REFUSED, "a non-empty `refusal` field, whatever the finish reason"),
    Cause.RATE_LIMITED: Row(S.TRANSPORT_FAILURE, "HTTP 429 (Retry-After honoured)"),
    Cause.UNAVAILABLE: Row(S.TRANSPORT_FAILURE, "HTTP 408, 502, 503, 504"),
    Cause.CONNECT_ERROR: Row(S.TRANSPORT_FAILURE, "connection refused, DNS or TLS failure, connect timeout"),
    Cause.READ_ERROR: Row(
        S.TRANSPORT_FAILURE, "connection dropped or reset mid-response; stream ended before a finish reason"
    ),
    Cause.DEADLINE: Row(S.TRANSPORT_FAILURE, "T_max (`deadline_s`) passed; it bounds the whole call, retries included"),
    Cause.CIRCUIT_OPEN: Row(S.TRANSPORT_FAILURE, "the client's circuit breaker is open; no request was sent"),
    Cause.INVALID_JSON_PREFIX: Row(
        S.REJECTED, "stream monitor: tool-call arguments (or JSON-mode content) stopped being a valid JSON prefix"
    ),
    Cause.PAYLOAD_TOO_LARGE: Row(
        S.REJECTED, "stream monitor: staged payload bytes, or the response body, exceeded M_max"
    ),
    Cause.EXTERNAL_CANCEL: Row(S.CANCELED, "the caller's cancel event was set"),
    Cause.ENGINE_ERROR: Row(S.FAULTED, "HTTP 500, 501 or any other 5xx not listed above"),
    Cause.CONTEXT_OVERFLOW: Row(
        S.FAULTED, "the server says the prompt exceeds the context window (HTTP 4xx/5xx or an error object)"
    ),
    Cause.STREAM_ERROR: Row(
        S.FAULTED,
        'an error reported inside a 200 response or stream: an `{"error": ...}` or `{"object": "error"}` chunk, '
        "an `event: error` or `error:` SSE field, bare JSON; the message is kept",
    ),
    Cause.HTTP_ERROR: Row(S.FAULTED, "any other non-2xx status (400, 401, 403, 404, 422, 3xx...)"),
    Cause.MALFORMED_PROTOCOL: Row(
        S.FAULTED, "body or SSE chunk is not the expected JSON; no choices; `[DONE]` without a finish reason"
    ),
    Cause.NON_UTF8: Row(S.FAULTED, "body or SSE line is not valid UTF-8"),
    Cause.UNKNOWN_FINISH_REASON: Row(S.FAULTED, "a `finish_reason` outside the values above"),
    Cause.INTERNAL_ERROR: Row(
        S.FAULTED, "an unexpected exception inside the client itself (a bug; the message names it)"
    ),
}
del S

RETRIED_STATUSES = frozenset({Status.TRANSPORT_FAILURE})
# Transport failures that a retry cannot help: no time is left, or the breaker says wait.
_FINAL_TRANSPORT = frozenset({Cause.DEADLINE, Cause.CIRCUIT_OPEN})

_FINISH = {
    "stop": Cause.FINISH_STOP,
    "tool_calls": Cause.FINISH_TOOL_CALLS,
    "function_call": Cause.FINISH_TOOL_CALLS,
    "length": Cause.FINISH_LENGTH,
    "content_filter": Cause.FINISH_CONTENT_FILTER,
}

# Phrasings of "prompt too long" seen from vLLM, SGLang, llama.cpp, llama-cpp-python and OpenAI.
_OVERFLOW = re.compile(
    r"context[ _-]?(length|window|size)|maximum context|too many tokens|prompt is too long"
    r"|exceeds? (the )?(context|max(imum)? (model|sequence) length)|n_ctx",
    re.IGNORECASE,
)


def status_of(cause: Cause) -> Status:
    return TABLE[cause].status


def is_retried(cause: Cause) -> bool:
    return TABLE[cause].status in RETRIED_STATUSES and cause not in _FINAL_TRANSPORT


def is_context_overflow(message: str) -> bool:
    return bool(_OVERFLOW.search(message))


def finish_cause(finish_reason: str | None, refusal: str | None) -> Cause | None:
    """Cause of a response that ended normally; None if no finish reason came."""
    if refusal:
        return Cause.REFUSAL
    if finish_reason is None:
        return None
    return _FINISH.get(finish_reason, Cause.UNKNOWN_FINISH_REASON)


def http_cause(status_code: int, message: str) -> Cause:
    """Cause of a non-2xx response; ``message`` is the server's error text."""
    if status_code == 429:
        return Cause.RATE_LIMITED
    if status_code in (408, 502, 503, 504):
        return Cause.UNAVAILABLE
    if is_context_overflow(message):
        return Cause.CONTEXT_OVERFLOW
    if status_code >= 500:
        return Cause.ENGINE_ERROR
    return Cause.HTTP_ERROR


def error_object_cause(message: str) -> Cause:
    """Cause of an error object delivered inside a 200 response."""
    return Cause.CONTEXT_OVERFLOW if is_context_overflow(message) else Cause.STREAM_ERROR


def mapping_markdown() -> str:
    """The table as Markdown, for docs/STATUS.md."""
    lines = ["| cause (ErrorDetail.kind) | raw signal | status | retried |", "|---|---|---|---|"]
    for cause, row in TABLE.items():
        retried = "yes" if is_retried(cause) else "no"
        lines.append(f"| `{cause.value}` | {row.signal} | {row.status.value} | {retried} |")
    return "\n".join(lines) + "\n"
