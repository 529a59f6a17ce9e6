"""Usage, timings, logprobs and the raw record in the envelope."""

from __future__ import annotations

import json

import pytest

from orchestrator.adapters.fault_server import Fault, Reply
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.context import TemplateOverhead
from orchestrator.contract import Message, Sampling
from orchestrator.envelope import Status


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_server_usage_is_recorded_as_server(srv, client, req, stream):
    srv.script([Reply(text="one two three", chunk_chars=4)])
    env = client.call(req("alpha beta gamma delta", stream=stream))
    u = env.usage
    assert (u.prompt_tokens, u.prompt_source, u.completion_source) == (4, "server", "server")
    assert u.completion_tokens == 4  # "one two three" is 4 chunks of 4 characters
    assert u.cached_source == "absent" and u.cached_prompt_tokens == 0


def test_cached_tokens_are_part_of_prompt_tokens(srv, client, req):
    usage = {"prompt_tokens": 1000, "completion_tokens": 5, "total_tokens": 1005,
             "prompt_tokens_details": {"cached_tokens": 800}}
    srv.script([Reply(text="ok", usage=usage)])
    u = client.call(req()).usage
    assert (u.prompt_tokens, u.cached_prompt_tokens, u.prefilled_tokens) == (1000, 800, 200)
    assert u.cached_source == "server"


@pytest.mark.parametrize("cached, kept, reported", [(1500, 1000, 1500), (1000, 1000, None), (999, 999, None)],
                         ids=["above-prompt", "equal", "below"])
def test_a_cached_count_above_the_prompt_is_clamped_and_the_servers_figure_kept(srv, client, req, cached, kept,
                                                                                 reported):
    usage = {"prompt_tokens": 1000, "completion_tokens": 5, "total_tokens": 1005,
             "prompt_tokens_details": {"cached_tokens": cached}}
    srv.script([Reply(text="ok", usage=usage)])
    env = client.call(req())
    u = env.usage
    assert (u.cached_prompt_tokens, u.cached_prompt_tokens_reported, u.cached_clamped) == (
        kept, reported, reported is not None)
    # Only a clamp adds the field: an envelope without one keeps its bytes.
    assert ("cached_prompt_tokens_reported" in env.model_dump_json()) is (reported is not None)


@pytest.mark.parametrize("reported_prompt", [200, 1000], ids=["without-cache", "with-cache"])
def test_llama_cpp_timings_are_not_double_counted(srv, client, req, reported_prompt):
    """llama.cpp reports ``timings.cache_n``; whether its prompt_tokens includes
    the cached part varies by version: both must give 1000 prompt, 800 cached."""
    usage = {"prompt_tokens": reported_prompt, "completion_tokens": 3}
    timings = '{"prompt_n": 200, "cache_n": 800, "predicted_n": 3}'
    body = ('{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],'
            f'"usage":{json.dumps(usage)},"timings":{timings}}}').encode()
    srv.script([Fault.raw(body)])
    u = client.call(req(stream=False)).usage
    assert (u.prompt_tokens, u.cached_prompt_tokens, u.prefilled_tokens) == (1000, 800, 200)


def test_streams_without_usage_are_estimated_and_marked(srv, client, req):
    srv.script([Reply(text="four words of output", usage="none")])
    env = client.call(req("five words in this prompt"))
    u = env.usage
    assert (u.prompt_source, u.completion_source, u.cached_source) == ("estimated", "estimated", "absent")
    # the word-count estimator through the context's template allowance:
    # 5 words + the per-message and per-request overheads
    overhead = TemplateOverhead()
    assert u.prompt_tokens == 5 + overhead.per_message + overhead.per_request and u.completion_tokens == 4


def test_default_estimator_is_tiktoken(srv, req):
    srv.script([Reply(text="hello world", usage="none")])
    with ModelClient(srv.base_url) as c:
        u = c.call(req("hello there")).usage
    assert u.prompt_source == "estimated" and u.completion_tokens == 2  # cl100k: "hello", " world"


def test_usage_is_requested_in_streams(srv, client, req):
    srv.script([Reply(text="x")])
    client.call(req())
    assert srv.requests[0].json["stream_options"] == {"include_usage": True}


def test_no_usage_is_invented_when_nothing_was_answered(srv, client, req):
    srv.script([Fault.http(500)])
    u = client.call(req()).usage
    assert (u.prompt_source, u.completion_source, u.prompt_tokens) == ("absent", "absent", 0)


def test_timings_are_ordered(srv, client, req):
    srv.script([Reply(text="abcdefgh" * 10, chunk_chars=8, tokens_per_s=100)])
    t = client.call(req()).timings
    assert t.ttft_s is not None and t.decode_s is not None
    assert 0 < t.ttft_s < t.total_s and 0.05 < t.decode_s < t.total_s


def test_logprobs_are_kept_when_asked(srv, client, req):
    srv.script([Reply(text="abcdef", chunk_chars=2), Reply(text="abcdef", chunk_chars=2)])
    asked = client.call(req(sampling=Sampling(logprobs=True, top_logprobs=1)))
    assert [lp["token"] for lp in asked.logprobs] == ["ab", "cd", "ef"]
    assert srv.requests[0].json["logprobs"] is True
    assert client.call(req()).logprobs is None


def test_raw_response_and_request_hash_are_recorded(srv, client, req):
    srv.script([Reply(text="raw me")])
    request = req()
    env = client.call(request)
    assert env.request_sha256 == request.sha256()
    assert env.raw_response.startswith("data: ") and "[DONE]" in env.raw_response


def test_tools_and_history_are_sent_on_the_wire(srv, client, req):
    from orchestrator.contract import ModelRequest, ToolCall, ToolSpec

    srv.script([Reply(text="ok")])
    request = ModelRequest(
        model="m", max_tokens=10,
        messages=(Message(role="user", content="go"),
                  Message(role="assistant", tool_calls=(ToolCall(id="c1", name="ls", arguments="{}"),)),
                  Message(role="tool", tool_call_id="c1", content="a.py")),
        tools=(ToolSpec(name="ls", description="list", parameters={"type": "object"}),),
        stop=("END",),
    )
    assert client.call(request).status is Status.COMPLETED
    sent = srv.requests[0].json
    assert sent["tools"][0]["function"]["name"] == "ls" and sent["stop"] == ["END"]
    assert sent["messages"][1]["tool_calls"][0]["id"] == "c1"


def test_api_key_is_sent_as_bearer(srv, req):
    srv.script([Reply(text="ok")])
    with ModelClient(srv.base_url, api_key="sk-test") as c:
        c.call(req())
    assert srv.requests[0].headers["authorization"] == "Bearer sk-test"
