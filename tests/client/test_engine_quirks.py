"""One test per row of ``orchestrator.adapters.model_client.engines.QUIRKS``, at the layer that
handles it (the wire tests drive the same classes over loopback HTTP)."""

from __future__ import annotations

import json
import sys

from orchestrator.adapters.model_client.accumulate import ResponseAccumulator
from orchestrator.adapters.model_client.call_usage import resolve_usage
from orchestrator.adapters.model_client.engines import QUIRK_IDS, QUIRKS, error_message, response_format
from orchestrator.adapters.model_client.monitor import StreamMonitor
from orchestrator.adapters.model_client.sse import SSEParser
from orchestrator.adapters.model_client.wire import WireCompletion
from orchestrator.contract import Message, ModelRequest

REQUEST = ModelRequest(model="m", messages=(Message(role="user", content="one two three"),), max_tokens=8)


def words(text: str) -> int:
    return len(text.split())


def accumulate(*bodies: dict) -> ResponseAccumulator:
    acc = ResponseAccumulator(StreamMonitor(1_000_000))
    for body in bodies:
        acc.add(WireCompletion.model_validate(body))
    return acc


def usage_of(*bodies: dict):
    acc = accumulate(*bodies)
    return resolve_usage(acc, REQUEST, acc.payload(), words)


def test_every_quirk_has_a_test():
    module = sys.modules[__name__]
    missing = [q.id for q in QUIRKS if not hasattr(module, f"test_quirk_{q.id}")]
    assert not missing, f"quirks without a test: {missing}"
    assert len(QUIRK_IDS) == len(QUIRKS)


def test_quirk_repeated_tool_name():
    delta = {"index": 0, "id": "c1", "function": {"name": "grep", "arguments": "{}"}}
    acc = accumulate(*({"choices": [{"delta": {"tool_calls": [delta]}}]} for _ in range(3)))
    assert acc.payload().tool_calls[0].name == "grep"


def test_quirk_timings_without_usage():
    u = usage_of({"choices": [], "timings": {"cache_n": 500, "prompt_n": 20, "predicted_n": 7}})
    assert (u.prompt_tokens, u.cached_prompt_tokens, u.completion_tokens, u.server_block) == (520, 500, 7, "timings")
    assert u.prompt_source == u.completion_source == u.cached_source == "server"


def test_quirk_prompt_tokens_without_cache():
    u = usage_of({"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 7},
                  "timings": {"cache_n": 500, "prompt_n": 20, "predicted_n": 7}})
    assert (u.prompt_tokens, u.cached_prompt_tokens) == (520, 500)


def test_quirk_no_usage_when_streaming():
    u = usage_of({"choices": [{"delta": {"content": "four five"}, "finish_reason": "stop"}]})
    assert (u.prompt_source, u.completion_source, u.completion_tokens) == ("estimated", "estimated", 2)
    assert u.server_block is None


def test_cached_never_exceeds_an_estimated_prompt():
    u = usage_of({"choices": [], "usage": {"prompt_tokens_details": {"cached_tokens": 4000}}})
    assert u.prompt_source == "estimated" and u.cached_prompt_tokens <= u.prompt_tokens == 4000


def sse_events(text: str):
    parser = SSEParser()
    return parser.feed(text.encode()) + parser.close()


def test_quirk_sse_error_field():
    [event] = sse_events('error: {"code":500,"message":"slot unavailable"}\n\n')
    assert (event.event, error_message({"error": {"message": "x"}})) == ("error", "x")
    assert '"slot unavailable"' in event.data


def test_quirk_event_error():
    [event] = sse_events('event: error\ndata: {"error": {"message": "overloaded"}}\n\n')
    assert event.event == "error" and "overloaded" in event.data


def test_quirk_bare_json_error():
    [event] = sse_events('{\n  "error": {"message": "boom"}\n}\n')
    assert event.event == "bare"
    assert error_message(json.loads(event.data)) == "boom"


def test_quirk_object_error_chunk():
    assert error_message({"object": "error", "message": "bad shape", "code": 400}) == "bad shape"
    assert error_message({"object": "chat.completion.chunk", "choices": []}) is None


def test_quirk_string_error():
    assert error_message({"error": "model not found"}) == "model not found"


def test_quirk_reasoning_field_name():
    acc = accumulate({"choices": [{"delta": {"reasoning_content": "a"}}]}, {"choices": [{"delta": {"reasoning": "b"}}]})
    assert acc.payload().reasoning == "ab" and acc.monitor.staged_bytes == 2


def test_quirk_reasoning_tokens_excluded():
    excluded = usage_of({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 45,
                                                  "completion_tokens_details": {"reasoning_tokens": 30}}})
    assert (excluded.completion_tokens, excluded.reasoning_tokens, excluded.reasoning_convention) == (
        35,
        30,
        "excluded",
    )
    included = usage_of({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 35, "total_tokens": 45,
                                                  "completion_tokens_details": {"reasoning_tokens": 30}}})
    assert (included.completion_tokens, included.reasoning_convention) == (35, "included")
    assumed = usage_of({"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 35,
                                                 "completion_tokens_details": {"reasoning_tokens": 30}}})
    assert (assumed.completion_tokens, assumed.reasoning_convention) == (35, "assumed_included")


def test_quirk_json_object_schema():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert response_format(schema, "json_object") == {"type": "json_object", "schema": schema}
    assert response_format(schema, "json_schema")["json_schema"]["schema"] == schema


def test_quirk_no_system_turn():
    from orchestrator.context import Budget, ContextAssembler, TiktokenCounter

    context = ContextAssembler(system="be brief", task="fix it", tools=(), budget=Budget(s_max=4096, k_max=256),
                      counter=TiktokenCounter("cl100k_base"), system_role="user")
    roles = [m.role for m in context.render(turn=0).messages]
    assert "system" not in roles and roles[0] == "user"


def test_quirk_unsent_end_of_generation():
    from orchestrator.envelope import Envelope, Status, Usage
    from orchestrator.token_drift import call_ids, length_problems

    def problems(engine: str, finish: str, completion: int) -> tuple[str, ...]:
        envelope = Envelope(status=Status.COMPLETED, finish_reason=finish, engine=engine,
                            usage=Usage(completion_tokens=completion, completion_source="server"),
                            completion_token_ids=(5, 6))
        return length_problems(call_ids("c", 0, envelope))

    assert problems("llama.cpp b11434-1", "stop", 3) == ()  # the end token it sampled and did not send
    assert problems("llama.cpp b11434-1", "stop", 4) == ("2 sampled ids, usage.completion_tokens 4",)
    assert problems("llama.cpp b11434-1", "length", 3) == ("2 sampled ids, usage.completion_tokens 3",)
    assert problems("vllm 0.10.1", "stop", 3) == ("2 sampled ids, usage.completion_tokens 3",)


def test_the_engines_doc_shows_the_table():
    from pathlib import Path

    from orchestrator.adapters.model_client.engines import quirks_markdown

    doc = Path(__file__).resolve().parents[2] / "docs" / "ENGINES.md"
    assert quirks_markdown() in doc.read_text(encoding="utf-8")


def test_bare_json_ends_at_the_next_field_line_even_without_a_blank_line():
    events = sse_events('{"error": {"message": "boom"}}\ndata: [DONE]\n\n')
    assert [(e.event, e.data) for e in events] == [("bare", '{"error": {"message": "boom"}}'), (None, "[DONE]")]


def test_quirk_post_sampling_probs():
    import math

    from orchestrator.logprobs import logprobs_mode, read_logprobs

    entry = {"id": 5, "token": "a", "prob": 0.8, "top_probs": [{"id": 5, "token": "a", "prob": 0.8}]}
    (token,) = read_logprobs([entry])
    assert (token.logprob, token.top[0].logprob) == (math.log(0.8), math.log(0.8))
    assert logprobs_mode({"post_sampling_probs": True}, "raw") == "post_sampling (request)"
    assert logprobs_mode({}, "raw") == "raw (engine)" and logprobs_mode({}, None) is None


GRAMMAR = 'root ::= "<tool name=\\"submit\\">{}</tool>"\n'


def _constrained_body(engine: str, version: str | None, protocol: str = "text") -> dict:
    from orchestrator.adapters.model_client.engines import constraint_for
    from orchestrator.contract import Message, ModelRequest

    constraint = constraint_for(engine, version, protocol, GRAMMAR, ("t.p: pattern not expressed",))
    request = ModelRequest(model="m", messages=(Message(role="user", content="x"),), max_tokens=8,
                           constraint=constraint)
    return request.wire_body()


def test_quirk_gbnf_grammar_field():
    for engine in ("llama.cpp", "llama-cpp-python"):
        body = _constrained_body(engine, "b11434")
        assert body["grammar"] == GRAMMAR
        assert not {"ebnf", "structured_outputs", "guided_grammar", "tool_choice"} & set(body)


def test_quirk_structured_outputs_renamed():
    for version in ("0.10.2", "0.11.0", "0.12.1", "1.0.0", None, "dev"):
        body = _constrained_body("vllm", version)
        assert body["structured_outputs"] == {"grammar": GRAMMAR} and "guided_grammar" not in body, version
    for version in ("0.6.6", "0.9.1", "v0.10.1"):
        body = _constrained_body("vllm", version)
        assert body["guided_grammar"] == GRAMMAR and "structured_outputs" not in body, version


def test_quirk_ebnf_field():
    body = _constrained_body("sglang", "0.5.2")
    assert body["ebnf"] == GRAMMAR
    assert not {"json_schema", "regex", "grammar"} & set(body)  # one constraint parameter per request


def test_quirk_tool_choice_required():
    from orchestrator.adapters.model_client.engines import constrains, constraint_for

    for engine in ("vllm", "sglang", "llama.cpp"):
        body = _constrained_body(engine, None, protocol="native")
        assert body["tool_choice"] == "required"
        assert not {"grammar", "ebnf", "structured_outputs"} & set(body)
    for engine in ("llama-cpp-python", "ollama", "openai-compatible"):
        assert not constrains(engine, "native") and constraint_for(engine, None, "native", None) is None
    assert not constrains("ollama", "text") and constraint_for("ollama", None, "text", GRAMMAR) is None
