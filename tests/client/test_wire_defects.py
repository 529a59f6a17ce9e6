"""Wire defect classes, each driven over real loopback HTTP through the fault
server's raw scenario, under every framing in ``wire_frames.FRAMINGS``
(1-byte and odd chunk boundaries, CRLF, keep-alive comments, JSON spread over
several ``data:`` lines). Samples under tests/data/engines are genuine
llama-server responses (see its README); the rest follow the engines'
documented formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.adapters.fault_server import Fault
from orchestrator.envelope import Status
from tests.client.wire_frames import FRAMINGS, Framing, chunk, frame

DATA = Path(__file__).resolve().parent.parent / "data" / "engines"


def captured(name: str) -> list[dict]:
    text = (DATA / name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def serve(srv, events, framing: Framing) -> None:
    srv.script([Fault.raw_stream(frame(events, framing), piece_bytes=framing.piece_bytes)])


framings = pytest.mark.parametrize("framing", FRAMINGS, ids=str)


# 1. A tool call's name repeated in later deltas.

def tool_delta(name: str | None, arguments: str, *, call_id: str | None = "call_1") -> dict:
    function = {"arguments": arguments} if name is None else {"name": name, "arguments": arguments}
    call = {"index": 0, "type": "function", "function": function}
    if call_id:
        call["id"] = call_id
    return chunk({"tool_calls": [call]})


@framings
def test_repeated_tool_name_is_not_concatenated(srv, client, req, framing):
    events = [("data", tool_delta("read_file", "")), ("data", tool_delta("read_file", '{"path": ')),
              ("data", tool_delta("read_file", '"a.py"}', call_id=None)),
              ("data", chunk(finish="tool_calls")), ("data", "[DONE]")]
    serve(srv, events, framing)
    env = client.call(req())
    assert env.status is Status.COMPLETED, env.error
    [call] = env.payload.tool_calls
    assert (call.id, call.name, call.arguments) == ("call_1", "read_file", '{"path": "a.py"}')
    # The repeats are not staged twice against M_max either.
    assert env.payload_bytes == len("call_1") + len("read_file") + len('{"path": "a.py"}')


@framings
def test_a_name_split_across_deltas_is_still_joined(srv, client, req, framing):
    events = [("data", tool_delta("read_", "")), ("data", tool_delta("file", "{}", call_id=None)),
              ("data", chunk(finish="tool_calls")), ("data", "[DONE]")]
    serve(srv, events, framing)
    env = client.call(req())
    assert env.status is Status.COMPLETED, env.error
    assert env.payload.tool_calls[0].name == "read_file"


# 2. llama-server timings with no usage.

@framings
def test_timings_without_usage_give_the_servers_own_figures(srv, client, req, framing):
    role, reasoning = captured("llama_server_b6881_reasoning_chunks.jsonl")
    # llama-server's last chunk as some versions send it: timings, no usage (documented format).
    last = chunk(
        finish="stop",
        timings={"cache_n": 1100, "prompt_n": 4, "prompt_ms": 110.6, "predicted_n": 61, "predicted_ms": 3012.7},
    )
    events = [
        ("data", role),
        ("data", reasoning),
        ("data", chunk({"content": "Hello"})),
        ("data", last),
        ("data", "[DONE]"),
    ]
    serve(srv, events, framing)
    env = client.call(req("hi"))
    assert env.status is Status.COMPLETED, env.error
    u = env.usage
    assert (u.prompt_tokens, u.cached_prompt_tokens, u.completion_tokens) == (1104, 1100, 61)
    assert (u.prompt_source, u.cached_source, u.completion_source) == ("server", "server", "server")
    assert u.server_block == "timings"
    assert u.cached_prompt_tokens <= u.prompt_tokens
    assert env.payload.reasoning == "We" and env.payload.text == "Hello"
    assert env.system_fingerprint == "b6881-8b11deea4"


@framings
def test_usage_and_timings_without_cache_n(srv, client, req, framing):
    final = captured("llama_server_b6097_final_chunk.json")[0]
    serve(srv, [("data", chunk({"content": "Hello"})), ("data", final), ("data", "[DONE]")], framing)
    env = client.call(req("hi"))
    u = env.usage
    assert (u.prompt_tokens, u.completion_tokens, u.cached_prompt_tokens) == (1085, 247, 0)
    assert (u.server_block, u.cached_source) == ("usage+timings", "absent")


# 3. Errors inside a 200 text/event-stream: FAULTED with the cause, message kept, not retried.

LLAMA_OVERFLOW = {"code": 400, "message": "the request exceeds the available context size, try increasing it",
                  "type": "exceed_context_size_error"}
ERRORS = {
    "llama-error-field": ([("error_field", LLAMA_OVERFLOW)], "context_overflow", "exceeds the available context size"),
    "event-error": (
        [("event_error", {"error": {"message": "CUDA error: out of memory", "type": "server_error"}})],
        "stream_error",
        "CUDA error: out of memory",
    ),
    "bare-json": (
        [("bare", {"error": {"message": "This model's maximum context length is 2048 tokens.", "code": 400}})],
        "context_overflow",
        "maximum context length is 2048",
    ),
    "vllm-object-error": (
        [
            (
                "data",
                {
                    "object": "error",
                    "message": "Internal worker died",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 503,
                },
            ),
            ("data", "[DONE]"),
        ],
        "stream_error",
        "Internal worker died",
    ),
    "string-error": (
        [("data", {"error": "model 'gemma' not found, try pulling it first"})],
        "stream_error",
        "not found, try pulling",
    ),
}


@framings
@pytest.mark.parametrize("case", list(ERRORS), ids=str)
def test_in_band_errors_are_faulted_with_their_message(srv, client, req, framing, case):
    events, kind, words = ERRORS[case]
    prefix = [] if case == "bare-json" else [("data", chunk({"role": "assistant", "content": "par"}))]
    serve(srv, prefix + events, framing)
    env = client.call(req())
    assert env.status is Status.FAULTED, env.error
    assert env.error.kind == kind, env.error
    assert words in env.error.message
    assert len(srv.requests) == 1  # not retried as a dropped connection
    assert env.payload.text in ("", "par")


def test_bare_json_that_is_not_an_error_is_malformed(srv, client, req):
    serve(srv, [("bare", {"hello": "world"})], FRAMINGS[0])
    env = client.call(req())
    assert (env.status, env.error.kind) == (Status.FAULTED, "malformed_protocol")
    assert "hello" in env.error.message


@pytest.mark.parametrize("body", [
    {"object": "error", "message": "prompt is too long for max_model_len", "code": 400},
    {"error": "prompt is too long"},
], ids=["object-error", "string-error"])
def test_error_in_a_200_json_body(srv, client, req, body):
    srv.script([Fault.raw(json.dumps(body).encode())])
    env = client.call(req(stream=False))
    assert (env.status, env.error.kind) == (Status.FAULTED, "context_overflow")
    assert "prompt is too long" in env.error.message


# 4. Reasoning deltas.

@framings
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_deltas_are_kept_apart_from_text(srv, client, req, framing, field):
    events = [("data", chunk({"role": "assistant", field: "Think "})), ("data", chunk({field: "hard."})),
              ("data", chunk({"content": "Answer"})), ("data", chunk(finish="stop")), ("data", "[DONE]")]
    serve(srv, events, framing)
    env = client.call(req())
    assert env.status is Status.COMPLETED, env.error
    assert (env.payload.reasoning, env.payload.text) == ("Think hard.", "Answer")
    assert env.payload_bytes == len("Think hard.Answer")


def test_reasoning_counts_against_m_max(srv, client, req):
    events = [("data", chunk({"reasoning_content": "x" * 100})) for _ in range(10)] + [("data", chunk(finish="stop"))]
    serve(srv, events, FRAMINGS[0])
    env = client.call(req(max_payload_bytes=500))
    assert (env.status, env.error.kind) == (Status.REJECTED, "payload_too_large")


@pytest.mark.parametrize("piece_bytes", [None, 1, 5])
def test_captured_non_streamed_reasoning_body(srv, client, req, piece_bytes):
    body = (DATA / "llama_server_b7634_reasoning_length.json").read_bytes()
    srv.script([Fault.raw(body, piece_bytes=piece_bytes)])
    env = client.call(req(stream=False))
    assert env.status is Status.TRUNCATED
    assert env.payload.reasoning == "First, I need to determine the positions of both the hour and minute hands on"
    assert env.payload.text == ""
    u = env.usage
    assert (u.prompt_tokens, u.cached_prompt_tokens, u.completion_tokens, u.server_block) == (
        106,
        0,
        16,
        "usage+timings",
    )
