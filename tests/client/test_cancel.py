"""Early cancellation: when the monitor trips, the deadline passes or the caller
cancels, the call returns early and the server sees the client hang up before
it sent the rest. Asserted causally (what the server saw, how far the stream
got), never by wall time, which a loaded machine stretches; the contract's
100 ms latency is measured side by side in bench/bench_cancel.py."""

from __future__ import annotations

import threading
import time

from orchestrator.adapters.fault_server import Fault, Reply, ScriptedToolCall
from orchestrator.envelope import Status

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


def test_monitor_trip_stops_the_stream_early_and_server_sees_disconnect(srv, client, req):
    k = 200
    srv.script([long_tool_call(k), Reply(text="never asked")])
    env = client.call(req(deadline_s=60))
    # Still streaming when the call returned: the client hung up, not the server.
    stream = srv.streams[0]
    assert not stream.all_sent
    assert env.status is Status.REJECTED and env.error.kind == "invalid_json_prefix"
    assert f"at character {k}" in env.error.message
    (gone,) = srv.wait_disconnects(1, timeout_s=30)
    assert gone.request_index == 0
    # Stream chunk 0 opens the call (id, name); chunk k+1 carries argument character k.
    assert k + 1 < gone.chunks_sent < CHUNKS // 2 < gone.planned_chunks
    assert gone.at >= stream.sent_at[k + 1]  # the hang-up followed the bad token
    assert len(srv.requests) == 1  # REJECTED is never retried


def test_payload_limit_trip_cancels_stream_and_server_sees_disconnect(srv, client, req):
    srv.script([Reply(text="z" * CHUNKS, chunk_chars=1, tokens_per_s=RATE)])
    env = client.call(req(max_payload_bytes=100, deadline_s=60))
    assert env.status is Status.REJECTED and env.error.kind == "payload_too_large"
    assert not srv.streams[0].all_sent  # 101 chunks read, not 5000
    assert env.payload_bytes == 101
    assert srv.wait_disconnects(1)[0].chunks_sent < 200


def cancel_when(condition, cancel: threading.Event) -> threading.Thread:
    """Set ``cancel`` once ``condition()`` holds: a trigger on what the server
    did, not on a timer."""

    def watch() -> None:
        while not condition():
            time.sleep(0.005)
        cancel.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_external_cancel_stops_the_stream_early_and_server_sees_disconnect(srv, client, req):
    srv.script([Reply(text="w" * CHUNKS, chunk_chars=1, tokens_per_s=RATE), Reply(text="never asked")])
    cancel = threading.Event()
    watcher = cancel_when(lambda: bool(srv.streams) and srv.streams[0].chunks_sent >= 20, cancel)
    env = client.call(req(deadline_s=60), cancel=cancel)
    watcher.join()
    assert not srv.streams[0].all_sent
    assert env.status is Status.CANCELED and env.error.kind == "external_cancel"
    assert 0 < len(env.payload.text) < CHUNKS
    disconnect = srv.wait_disconnects(1, timeout_s=30)[0]
    assert 20 <= disconnect.chunks_sent < CHUNKS // 2
    assert len(srv.requests) == 1


def test_cancel_before_headers_is_honoured(srv, client, req):
    srv.script([Reply(text="late", delay_s=10)])
    cancel = threading.Event()
    cancel_when(lambda: bool(srv.requests), cancel)
    env = client.call(req(deadline_s=60), cancel=cancel)
    assert env.status is Status.CANCELED
    assert env.http_status is None  # returned before the (10 s late) headers


def test_cancel_already_set_sends_nothing(srv, client, req):
    cancel = threading.Event()
    cancel.set()
    env = client.call(req(), cancel=cancel)
    assert env.status is Status.CANCELED and srv.requests == []


def test_stall_mid_stream_past_deadline_is_transport_failure_not_retried(srv, client, req):
    srv.script([Fault.stall(10, after_chunk=2), Reply(text="never asked")])
    started = time.monotonic()
    env = client.call(req(deadline_s=0.5))
    assert env.status is Status.TRANSPORT_FAILURE and env.error.kind == "deadline"
    assert time.monotonic() - started >= 0.5  # not before the deadline (load can only add to it)
    assert env.payload.text  # the chunks before the stall were staged, and stay quarantined
    assert len(srv.requests) == 1 and len(env.attempts) == 1
    (gone,) = srv.wait_disconnects(1, timeout_s=30)  # the client hung up during the 10 s stall
    assert gone.chunks_sent < gone.planned_chunks and not srv.streams[0].all_sent


def test_stall_before_headers_past_deadline(srv, client, req):
    srv.script([Reply(text="late", delay_s=10)])
    started = time.monotonic()
    env = client.call(req(deadline_s=0.4, stream=False))
    assert env.status is Status.TRANSPORT_FAILURE and env.error.kind == "deadline"
    assert time.monotonic() - started >= 0.4
    assert env.http_status is None and len(srv.requests) == 1  # gave up before the 10 s late answer


def test_deadline_bounds_retries_too(srv, req):
    from orchestrator.adapters.model_client.client import ModelClient
    from orchestrator.adapters.model_client.retry import RetryPolicy

    srv.script([Fault.http(503, retry_after=0.3)] * 10)
    with ModelClient(srv.base_url, retry=RetryPolicy(max_attempts=10, base_s=0.01)) as c:
        env = c.call(req(deadline_s=1.0))
    assert env.status is Status.TRANSPORT_FAILURE
    # The client's own decisions: every wait honours Retry-After, and the
    # waits it took fit T_max; the one it would take next did not.
    waits = [a.backoff_s for a in env.attempts[:-1]]
    assert all(w >= 0.3 for w in waits) and sum(waits) < 1.0
    assert 1 <= len(env.attempts) <= 4 and len(srv.requests) == len(env.attempts)
    assert "would pass the deadline" in env.error.message
