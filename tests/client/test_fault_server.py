"""The fault server's own contract: scripts are consumed in order, requests
are recorded, scripts round-trip through JSON, and the plain routes work."""

from __future__ import annotations

import httpx

from orchestrator.adapters.fault_server import (
    Fault,
    FaultServer,
    HttpError,
    Reply,
    Script,
    ScriptedToolCall,
    StreamFault,
)
from orchestrator.envelope import Status


def test_script_is_consumed_one_step_per_request(srv, client, req):
    srv.script([Reply(tool_calls=(ScriptedToolCall(name="ls", arguments="{}"),)), Fault.http(503), Reply(text="done")])
    first = client.call(req("turn one"))
    assert first.status is Status.COMPLETED and first.payload.tool_calls[0].name == "ls"
    second = client.call(req("turn two"))  # 503 then "done" on the retry
    assert second.status is Status.COMPLETED and second.payload.text == "done"
    assert [r.json["messages"][0]["content"] for r in srv.requests] == ["turn one", "turn two", "turn two"]
    assert srv.pending == 0


def test_exhausted_script_answers_500_with_a_clear_message(srv, client, req):
    env = client.call(req())
    assert env.status is Status.FAULTED and "script exhausted" in env.error.message


def test_cycle_and_default():
    with FaultServer(default=Reply(text="default")) as server:
        server.script([Reply(text="a"), Reply(text="b")], cycle=True)
        texts = [
            httpx.post(f"{server.base_url}/chat/completions", json={"messages": []}).json()["choices"][0]["message"][
                "content"
            ]
            for _ in range(3)
        ]
        assert texts == ["a", "b", "a"]
        server.script([])
        reply = httpx.post(f"{server.base_url}/chat/completions", json={"messages": []}).json()
        assert reply["choices"][0]["message"]["content"] == "default"


def test_script_round_trips_through_json():
    script = Script(steps=(
        Reply(text="hi", tool_calls=(ScriptedToolCall(name="x", arguments='{"a": 1}'),),
              faults=(StreamFault(at_chunk=1, action="raw", data=b"\xff\x00"),)),
        Fault.rate_limited(2), Fault.context_overflow(), Fault.raw(b"\xfe"), Fault.hangup(), Fault.oversized(10),
    ), cycle=True)
    again = Script.model_validate_json(script.model_dump_json())
    assert again == script
    assert again.steps[0].faults[0].data == b"\xff\x00"
    assert isinstance(again.steps[1], HttpError) and again.steps[1].retry_after == 2


def test_models_and_health_routes(srv):
    root = srv.base_url.removesuffix("/v1")
    assert httpx.get(f"{srv.base_url}/models").json()["data"][0]["id"] == "fault-model"
    assert httpx.get(f"{root}/health").json() == {"status": "ok"}


def test_decode_rate_paces_the_stream(srv, client, req):
    srv.script([Reply(text="a" * 20, chunk_chars=1, tokens_per_s=100)])
    client.call(req())
    sent = srv.streams[0].sent_at
    assert len(sent) == 21  # 20 characters and the finish chunk
    assert sent[-1] - sent[0] >= 0.19


def test_completed_stream_is_not_a_disconnect(srv, client, req):
    srv.script([Reply(text="complete"), Reply(text="z" * 400, chunk_chars=1, tokens_per_s=200)])
    client.call(req())
    assert srv.streams[0].all_sent
    # A positive control: hang up on a second stream and wait until the server
    # has seen that disconnect; by then the first connection is long closed, so
    # a completed stream taken for a disconnect would be in the list too.
    with httpx.stream("POST", f"{srv.base_url}/chat/completions", json=req().wire_body()) as response:
        next(response.iter_bytes())
    disconnects = srv.wait_disconnects(1, timeout_s=30)
    assert [d.request_index for d in disconnects] == [1]
    assert not srv.streams[1].all_sent and disconnects[0].chunks_sent < disconnects[0].planned_chunks
