"""Early cancellation: when the monitor trips, the deadline passes or the caller
cancels, the call returns at once and the server sees the client hang up
before it sent the rest. The 100 ms bounds are the generous sanity bounds the
contract asks for, on a loopback connection."""

from __future__ import annotations

import threading
import time

from orchestrator.envelope import Status
from orchestrator.fault_server import Fault, Reply, ScriptedToolCall

CHUNKS = 5000
RATE = 400.0  # tokens/s: the whole stream would take 12.5 s


def long_tool_call(bad_at: int) -> Reply:
    """One tool call streamed one character per chunk; character ``bad_at``
    (0-based) is a second closing brace, so the arguments stop being a JSON
    prefix exactly there."""
    head = '{"content": "'
    body = "a" * (bad_at - len(head) - 2)
    args = head + body + '"}' + "}" + "b" * (CHUNKS - bad_at - 1)
    assert len(args) == CHUNKS and args[bad_at] == "}" and args[bad_at - 1] == "}"
    return Reply(tool_calls=(ScriptedToolCall(name="write_file", arguments=args),), chunk_chars=1, tokens_per_s=RATE)


def test_monitor_trip_cancels_within_100ms_and_server_sees_disconnect(srv, client, req):
    k = 200
    srv.script([long_tool_call(k), Reply(text="never asked")])
    env = client.call(req(deadline_s=30))
    returned = time.monotonic()
    assert env.status is Status.REJECTED and env.error.kind == "invalid_json_prefix"
    assert f"at character {k}" in env.error.message
    # Stream chunk 0 opens the call (id, name); chunk k+1 carries argument character k.
    stream = srv.streams[0]
    tripped_sent_at = stream.sent_at[k + 1]
    assert returned - tripped_sent_at < 0.1, f"returned {1000 * (returned - tripped_sent_at):.0f} ms after the bad token"
    disconnects = srv.wait_disconnects(1)
    assert len(disconnects) == 1
    assert disconnects[0].request_index == 0
    assert disconnects[0].chunks_sent < CHUNKS // 2 < disconnects[0].planned_chunks
    assert disconnects[0].at - tripped_sent_at < 0.5
    assert len(srv.requests) == 1  # REJECTED is never retried


def test_payload_limit_trip_cancels_stream_and_server_sees_disconnect(srv, client, req):
    srv.script([Reply(text="z" * CHUNKS, chunk_chars=1, tokens_per_s=RATE)])
    started = time.monotonic()
    env = client.call(req(max_payload_bytes=100, deadline_s=30))
    assert env.status is Status.REJECTED and env.error.kind == "payload_too_large"
    assert time.monotonic() - started < 2.0  # 101 chunks at 400/s, not 5000
    assert env.payload_bytes == 101
    assert srv.wait_disconnects(1)[0].chunks_sent < 200


def test_external_cancel_returns_within_100ms_and_server_sees_disconnect(srv, client, req):
    srv.script([Reply(text="w" * CHUNKS, chunk_chars=1, tokens_per_s=RATE), Reply(text="never asked")])
    cancel = threading.Event()
    fired_at: list[float] = []

    def fire() -> None:
        fired_at.append(time.monotonic())
        cancel.set()

    timer = threading.Timer(0.5, fire)
    timer.start()
    env = client.call(req(deadline_s=30), cancel=cancel)
    returned = time.monotonic()
    timer.join()
    assert env.status is Status.CANCELED and env.error.kind == "external_cancel"
    assert returned - fired_at[0] < 0.1, f"returned {1000 * (returned - fired_at[0]):.0f} ms after cancel"
    assert 0 < len(env.payload.text) < CHUNKS
    disconnect = srv.wait_disconnects(1)[0]
    assert disconnect.chunks_sent < CHUNKS // 2
    assert len(srv.requests) == 1


def test_cancel_before_headers_is_honoured(srv, client, req):
    srv.script([Reply(text="late", delay_s=5)])
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    started = time.monotonic()
    env = client.call(req(deadline_s=30), cancel=cancel)
    assert env.status is Status.CANCELED
    assert time.monotonic() - started < 1.0
    assert env.http_status is None


def test_cancel_already_set_sends_nothing(srv, client, req):
    cancel = threading.Event()
    cancel.set()
    env = client.call(req(), cancel=cancel)
    assert env.status is Status.CANCELED and srv.requests == []


def test_stall_mid_stream_past_deadline_is_transport_failure_not_retried(srv, client, req):
    srv.script([Fault.stall(10, after_chunk=2), Reply(text="never asked")])
    started = time.monotonic()
    env = client.call(req(deadline_s=0.5))
    elapsed = time.monotonic() - started
    assert env.status is Status.TRANSPORT_FAILURE and env.error.kind == "deadline"
    assert 0.5 <= elapsed < 0.8
    assert env.payload.text  # the chunks before the stall were staged, and stay quarantined
    assert len(srv.requests) == 1 and len(env.attempts) == 1
    assert srv.wait_disconnects(1)  # the client hung up on the stalled stream


def test_stall_before_headers_past_deadline(srv, client, req):
    srv.script([Reply(text="late", delay_s=10)])
    started = time.monotonic()
    env = client.call(req(deadline_s=0.4, stream=False))
    assert env.status is Status.TRANSPORT_FAILURE and env.error.kind == "deadline"
    assert time.monotonic() - started < 0.8


def test_deadline_bounds_retries_too(srv, req):
    from orchestrator.client import ModelClient
    from orchestrator.retry import RetryPolicy

    srv.script([Fault.http(503, retry_after=0.3)] * 10)
    with ModelClient(srv.base_url, retry=RetryPolicy(max_attempts=10, base_s=0.01)) as c:
        started = time.monotonic()
        env = c.call(req(deadline_s=1.0))
    assert env.status is Status.TRANSPORT_FAILURE
    assert time.monotonic() - started < 1.1
    assert 2 <= len(env.attempts) <= 4  # each retry waits >= 0.3 s, so at most 3 fit in 1 s
    assert "would pass the deadline" in env.error.message
