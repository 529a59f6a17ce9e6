"""One test per status and per injected fault, over real HTTP against the
fault server: the exact status, the escrow gate, and whether it was retried."""

from __future__ import annotations

import pytest

from orchestrator.adapters.fault_server import Fault, Reply, ScriptedToolCall
from orchestrator.envelope import Status
from orchestrator.escrow import QuarantinedPayloadError, release_from_escrow

BOTH = pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])


def assert_quarantined(envelope, status: Status, kind: str) -> None:
    assert envelope.status is status, envelope.error
    assert envelope.error is not None and envelope.error.kind == kind, envelope.error
    with pytest.raises(QuarantinedPayloadError) as caught:
        release_from_escrow(envelope)
    assert caught.value.envelope is envelope
    assert caught.value.status is status


@BOTH
def test_stop_is_completed_and_released(srv, client, req, stream):
    srv.script([Reply(text="all done here", model="served-model", system_fingerprint="fp_1")])
    env = client.call(req(stream=stream))
    assert env.status is Status.COMPLETED and env.error is None
    assert release_from_escrow(env).text == "all done here"
    assert (env.finish_reason, env.http_status, env.model, env.system_fingerprint) == (
        "stop",
        200,
        "served-model",
        "fp_1",
    )
    assert env.engine == "escrow-fault-server"
    assert len(env.attempts) == 1 and len(srv.requests) == 1
    assert srv.requests[0].json["messages"][0]["content"] == "write a test"


@BOTH
def test_tool_calls_are_completed_with_accumulated_arguments(srv, client, req, stream):
    calls = (ScriptedToolCall(name="read_file", arguments='{"path": "src/app.py"}', id="c1"),
             ScriptedToolCall(name="bash", arguments='{"cmd": "ls -la"}'))
    srv.script([Reply(text="", tool_calls=calls, chunk_chars=3)])
    env = client.call(req(stream=stream))
    assert env.status is Status.COMPLETED and env.finish_reason == "tool_calls"
    got = release_from_escrow(env).tool_calls
    assert [(c.name, c.arguments) for c in got] == [
        ("read_file", '{"path": "src/app.py"}'),
        ("bash", '{"cmd": "ls -la"}'),
    ]
    assert got[0].id == "c1"


@BOTH
def test_length_is_truncated_and_not_retried(srv, client, req, stream):
    srv.script([Fault.truncated("rm -rf /tmp/scratch"), Reply(text="never asked")])
    env = client.call(req(stream=stream))
    assert_quarantined(env, Status.TRUNCATED, "finish_length")
    assert env.payload.text == "rm -rf /tmp/scratch"
    assert len(srv.requests) == 1


@BOTH
@pytest.mark.parametrize("reply,kind", [
    (Fault.refusal("I won't do that."), "refusal"),
    (Fault.content_filter("partial"), "finish_content_filter"),
], ids=["refusal-field", "content-filter"])
def test_refusals_are_refused_and_not_retried(srv, client, req, stream, reply, kind):
    srv.script([reply, Reply(text="never asked")])
    env = client.call(req(stream=stream))
    assert_quarantined(env, Status.REFUSED, kind)
    assert env.payload.refusal == reply.refusal
    assert len(srv.requests) == 1


@BOTH
def test_invalid_tool_arguments_are_rejected(srv, client, req, stream):
    srv.script([Fault.invalid_tool_arguments('{"path": "a.py"}', '}, "x": 1'), Reply(text="never asked")])
    env = client.call(req(stream=stream))
    assert_quarantined(env, Status.REJECTED, "invalid_json_prefix")
    # Streamed, the monitor stops at the first bad character; whole, it sees all of it.
    assert env.payload.tool_calls[0].arguments.startswith('{"path": "a.py"}}')
    assert len(srv.requests) == 1


def test_json_mode_content_is_monitored(srv, client, req):
    srv.script([Reply(text='{"answer": 42}} trailing'), Reply(text="never asked")])
    env = client.call(req(response_format={"type": "json_object"}))
    assert_quarantined(env, Status.REJECTED, "invalid_json_prefix")
    srv.script([Reply(text='{"answer": 42}')])
    assert client.call(req(response_format={"type": "json_object"})).status is Status.COMPLETED


@BOTH
def test_payload_over_m_max_is_rejected(srv, client, req, stream):
    srv.script([Reply(text="y" * 5000), Reply(text="never asked")])
    env = client.call(req(stream=stream, max_payload_bytes=1000))
    assert_quarantined(env, Status.REJECTED, "payload_too_large")
    assert len(srv.requests) == 1


@BOTH
def test_context_overflow_400_is_faulted(srv, client, req, stream):
    srv.script([Fault.context_overflow(), Reply(text="never asked")])
    env = client.call(req(stream=stream))
    assert_quarantined(env, Status.FAULTED, "context_overflow")
    assert env.http_status == 400 and "maximum context length" in env.error.message
    assert len(srv.requests) == 1


@BOTH
def test_engine_500_is_faulted_not_retried(srv, client, req, stream):
    srv.script([Fault.http(500, message="CUDA error: an illegal memory access"), Reply(text="never asked")])
    env = client.call(req(stream=stream))
    assert_quarantined(env, Status.FAULTED, "engine_error")
    assert "illegal memory access" in env.error.message
    assert len(srv.requests) == 1 and len(env.attempts) == 1


@pytest.mark.parametrize("code", [400, 401, 404, 422])
def test_other_4xx_is_faulted(srv, client, req, code):
    srv.script([Fault.http(code, message="bad request body"), Reply(text="never asked")])
    env = client.call(req())
    assert_quarantined(env, Status.FAULTED, "http_error")
    assert env.http_status == code and len(srv.requests) == 1


def test_error_object_mid_stream_is_faulted(srv, client, req):
    srv.script([Fault.error_mid_stream(after_chunk=2, message="CUDA error: out of memory"), Reply(text="never asked")])
    env = client.call(req())
    assert_quarantined(env, Status.FAULTED, "stream_error")
    assert "out of memory" in env.error.message and len(srv.requests) == 1


def test_context_overflow_as_error_object_is_faulted(srv, client, req):
    srv.script([Fault.error_mid_stream(after_chunk=0, message="prompt is too long: 9000 tokens > n_ctx 8192")])
    env = client.call(req())
    assert_quarantined(env, Status.FAULTED, "context_overflow")


def test_malformed_chunk_is_faulted(srv, client, req):
    srv.script([Fault.malformed_chunk(after_chunk=1), Reply(text="never asked")])
    env = client.call(req())
    assert_quarantined(env, Status.FAULTED, "malformed_protocol")
    assert "chunk 2" in env.error.message and len(srv.requests) == 1


@pytest.mark.parametrize("code", [502, 503, 504])
def test_unavailable_is_transport_failure_retried_to_the_limit(srv, client, req, code):
    srv.script([Fault.http(code)] * 3 + [Reply(text="not reached")])
    env = client.call(req())
    assert_quarantined(env, Status.TRANSPORT_FAILURE, "unavailable")
    assert len(srv.requests) == 3 == len(env.attempts)
    assert all(a.status is Status.TRANSPORT_FAILURE and a.http_status == code for a in env.attempts)
    assert "gave up after 3 attempt(s)" in env.error.message


def test_disconnect_mid_stream_is_transport_failure_then_retried(srv, client, req):
    srv.script([Fault.disconnect(after_chunk=2), Reply(text="second try works")])
    env = client.call(req())
    assert env.status is Status.COMPLETED and env.payload.text == "second try works"
    assert [a.status for a in env.attempts] == [Status.TRANSPORT_FAILURE, Status.COMPLETED]
    assert env.attempts[0].error.kind == "read_error"
    assert len(srv.requests) == 2


def test_connection_refused_is_transport_failure(req, fast_retry):
    from orchestrator.adapters.model_client.client import ModelClient

    with ModelClient("http://127.0.0.1:9/v1", retry=fast_retry) as c:
        env = c.call(req())
    assert_quarantined(env, Status.TRANSPORT_FAILURE, "connect_error")
    assert len(env.attempts) == 3 and env.http_status is None


def test_stream_ending_without_done_after_finish_is_accepted(srv, client, req):
    srv.script([Reply(text="no done marker", send_done=False)])
    env = client.call(req())
    assert env.status is Status.COMPLETED and env.payload.text == "no done marker"


def test_done_without_finish_reason_is_faulted(srv, client, req):
    from orchestrator.adapters.fault_server import StreamFault

    raw = b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\ndata: [DONE]\n\n'
    srv.script([Reply(text="", faults=(StreamFault(at_chunk=0, action="raw", data=raw),))])
    env = client.call(req())
    assert_quarantined(env, Status.FAULTED, "malformed_protocol")
    assert "[DONE]" in env.error.message and env.payload.text == "hi"
