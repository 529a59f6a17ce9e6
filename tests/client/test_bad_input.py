"""Hostile or broken servers: every case ends in a definite status with a
clear detail, and no exception reaches the caller."""

from __future__ import annotations

import time

import pytest

from orchestrator.adapters.fault_server import Fault, Reply, StreamFault
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.adapters.model_client.retry import RetryPolicy
from orchestrator.envelope import Status

ONE_TRY = RetryPolicy(max_attempts=1)
FIFTY_MB = 50 * 1024 * 1024


@pytest.fixture
def once(srv):
    with ModelClient(srv.base_url, retry=ONE_TRY, token_estimator=lambda s: len(s.split())) as c:
        yield c


@pytest.mark.parametrize("body", [b'{"choices": [', b"not json at all", b"[1, 2, 3]", b'{"choices": "nope"}', b""])
def test_malformed_json_body_is_faulted(srv, once, req, body):
    srv.script([Fault.raw(body)])
    env = once.call(req(stream=False))
    assert env.status is Status.FAULTED and env.error.kind == "malformed_protocol"
    assert "not a completion" in env.error.message


def test_body_without_choices_is_faulted(srv, once, req):
    srv.script([Fault.raw(b'{"object": "chat.completion", "choices": []}')])
    env = once.call(req(stream=False))
    assert env.status is Status.FAULTED and env.error.message == "response has no choices"


def test_non_utf8_body_is_faulted(srv, once, req):
    srv.script([Fault.raw(b'{"choices": [{"index": 0, "message": {"content": "\xff\xfe"}, "finish_reason": "stop"}]}')])
    env = once.call(req(stream=False))
    assert env.status is Status.FAULTED and env.error.kind == "non_utf8"
    assert "not UTF-8 at byte" in env.error.message
    assert "\ufffd" in env.raw_response  # kept, replaced for display only


def test_non_utf8_sse_line_is_faulted(srv, once, req):
    srv.script(
        [Reply(text="fine", faults=(StreamFault(at_chunk=1, action="raw", data=b'data: {"x": "\xc3\x28"}\n\n'),))]
    )
    env = once.call(req())
    assert env.status is Status.FAULTED and env.error.kind == "non_utf8"


def test_multibyte_utf8_split_across_reads_is_fine(srv, once, req):
    text = "naïve café — 漢字 🙂" * 20
    srv.script([Reply(text=text, chunk_chars=1)])
    env = once.call(req())
    assert env.status is Status.COMPLETED and env.payload.text == text
    assert env.payload_bytes == len(text.encode("utf-8"))


@pytest.mark.slow
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_fifty_megabyte_body_is_rejected_early(srv, once, req, stream):
    srv.script([Fault.oversized(FIFTY_MB)])
    started = time.monotonic()
    env = once.call(req(stream=stream, max_payload_bytes=1_000_000))
    assert env.status is Status.REJECTED and env.error.kind == "payload_too_large"
    assert time.monotonic() - started < 5
    assert env.payload_bytes <= 1_000_000 + 64 * 1024
    assert len(env.raw_response) < 70 * 1024 and "more bytes not kept" in env.raw_response


def test_single_endless_sse_line_is_bounded(srv, once, req):
    line = b"data: " + b"q" * 3_000_000  # never ends: no newline
    srv.script([Reply(text="x", faults=(StreamFault(at_chunk=0, action="raw", data=line),))])
    env = once.call(req(max_payload_bytes=100_000))
    assert env.status is Status.REJECTED and env.error.kind == "payload_too_large"
    assert "SSE line longer" in env.error.message


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_unknown_finish_reason_is_faulted(srv, once, req, stream):
    srv.script([Reply(text="hmm", finish_reason="eos_token_maybe")])
    env = once.call(req(stream=stream))
    assert env.status is Status.FAULTED and env.error.kind == "unknown_finish_reason"
    assert env.finish_reason == "eos_token_maybe" and env.payload.text == "hmm"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_server_closing_at_once_is_transport_failure(srv, once, req, stream):
    srv.script([Fault.hangup()])
    env = once.call(req(stream=stream))
    assert env.status is Status.TRANSPORT_FAILURE and env.error.kind == "read_error"
    assert "disconnected" in env.error.message.lower()
    assert env.http_status is None and env.raw_response is None


def test_error_response_that_is_not_json_keeps_its_text(srv, once, req):
    srv.script([Fault.raw(b"<html>502 Bad Gateway</html>", status=502, content_type="text/html")])
    env = once.call(req())
    assert env.status is Status.TRANSPORT_FAILURE and "Bad Gateway" in env.error.message


def test_sse_reply_to_a_non_streamed_request_is_read(srv, once, req):
    sse = b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    srv.script([Fault.raw(sse, content_type="text/event-stream")])
    env = once.call(req(stream=False))
    assert env.status is Status.COMPLETED and env.payload.text == "hi"


def test_failing_estimator_leaves_usage_absent(srv, req):
    def broken_estimator(text: str) -> int:
        raise RuntimeError("estimator exploded")

    srv.script([Reply(text="fine", usage="none")])
    with ModelClient(srv.base_url, retry=ONE_TRY, token_estimator=broken_estimator) as c:
        env = c.call(req())
    # A failing estimator only leaves the usage figures absent.
    assert env.status is Status.COMPLETED and env.usage.prompt_source == "absent"


def test_unexpected_exception_becomes_faulted_envelope(srv, req, monkeypatch):
    import orchestrator.adapters.model_client.client as client_module

    def explode(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(client_module, "run_attempt", explode)
    with ModelClient(srv.base_url, retry=ONE_TRY) as c:
        env = c.call(req())
    assert env.status is Status.FAULTED and env.error.kind == "internal_error"
    assert "ZeroDivisionError: boom" in env.error.message
