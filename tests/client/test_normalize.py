"""The status mapping table: complete, consistent, and documented as is."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.adapters.model_client.normalize import (
    TABLE,
    Cause,
    error_object_cause,
    finish_cause,
    http_cause,
    is_context_overflow,
    is_retried,
    mapping_markdown,
    status_of,
)
from orchestrator.envelope import Status

DOC = Path(__file__).resolve().parents[2] / "docs" / "STATUS.md"


def test_every_cause_has_a_row_and_every_status_is_reachable():
    assert set(TABLE) == set(Cause)
    assert {row.status for row in TABLE.values()} == set(Status)


def test_only_transport_failures_are_retried():
    for cause in Cause:
        if is_retried(cause):
            assert status_of(cause) is Status.TRANSPORT_FAILURE
    assert not is_retried(Cause.DEADLINE) and not is_retried(Cause.CIRCUIT_OPEN)
    assert is_retried(Cause.RATE_LIMITED) and is_retried(Cause.READ_ERROR)


def test_docs_carry_the_table_verbatim():
    assert mapping_markdown() in DOC.read_text(encoding="utf-8")


@pytest.mark.parametrize("reason,refusal,cause", [
    ("stop", None, Cause.FINISH_STOP), ("tool_calls", None, Cause.FINISH_TOOL_CALLS),
    ("function_call", None, Cause.FINISH_TOOL_CALLS), ("length", None, Cause.FINISH_LENGTH),
    ("content_filter", None, Cause.FINISH_CONTENT_FILTER), ("stop", "no.", Cause.REFUSAL),
    ("length", "no.", Cause.REFUSAL), ("eos", None, Cause.UNKNOWN_FINISH_REASON), (None, None, None),
    ("stop", "", Cause.FINISH_STOP),
])
def test_finish_cause(reason, refusal, cause):
    assert finish_cause(reason, refusal) == cause


@pytest.mark.parametrize("code,message,cause", [
    (429, "", Cause.RATE_LIMITED), (408, "", Cause.UNAVAILABLE), (502, "", Cause.UNAVAILABLE),
    (503, "", Cause.UNAVAILABLE), (504, "", Cause.UNAVAILABLE), (500, "CUDA OOM", Cause.ENGINE_ERROR),
    (501, "", Cause.ENGINE_ERROR), (400, "This model's maximum context length is 2048 tokens", Cause.CONTEXT_OVERFLOW),
    (400, "Requested tokens (9000) exceed context window of 8192", Cause.CONTEXT_OVERFLOW),
    (413, "prompt is too long", Cause.CONTEXT_OVERFLOW), (400, "bad temperature", Cause.HTTP_ERROR),
    (401, "", Cause.HTTP_ERROR), (307, "", Cause.HTTP_ERROR),
])
def test_http_cause(code, message, cause):
    assert http_cause(code, message) is cause


def test_context_overflow_phrasings():
    for text in ["too many tokens in prompt", "input exceeds the max model length", "n_ctx is 2048",
                 "context_length_exceeded"]:
        assert is_context_overflow(text), text
    assert not is_context_overflow("model not found")
    assert error_object_cause("maximum context length exceeded") is Cause.CONTEXT_OVERFLOW
    assert error_object_cause("worker died") is Cause.STREAM_ERROR
