"""Context assembly against the real llama.cpp server (llama-cpp-python)."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from orchestrator.context import Budget, ContextAssembler, PromptBytes, prefix_report
from orchestrator.contract import Message
from orchestrator.model_client.server_tokenizer import discover_context_window, probe_server_tokenizer

MODEL = "gemma-3-270m"
PREAMBLE = "You are a coding agent working in a sandboxed repository. Answer with one short step. " * 20


@pytest.fixture
def http():
    with httpx.Client(timeout=300.0) as client:
        yield client


@pytest.mark.llama
def test_server_tokenizer_and_window(llama_url, http):
    tok = probe_server_tokenizer(llama_url + "/v1", model=MODEL, http=http)
    assert tok.dialect == "llama_cpp"
    assert tok.count("") == 0
    assert 1 <= tok.count("hello world") <= 4
    assert tok.count("def parse(x):\n    return x") > tok.count("def")
    # llama-cpp-python reports no context window: S_max has to come from config.
    assert discover_context_window(llama_url + "/v1", model=MODEL, http=http) is None


@pytest.mark.llama
@pytest.mark.slow
def test_stable_layout_makes_later_turns_cheaper(llama_url, http):
    tok = probe_server_tokenizer(llama_url + "/v1", model=MODEL, http=http)
    # A fresh nonce first, so no earlier request's cache serves turn 0; gemma's
    # template drops system messages, hence system_role="user".
    ctx = ContextAssembler(system=f"run {uuid.uuid4()}\n{PREAMBLE}", task="Make tests/test_parse.py pass.", tools=(),
                  budget=Budget(s_max=8192, k_max=8), counter=tok, system_role="user")
    seconds, reported, rendered, prompts = [], [], [], []
    for turn in range(4):
        if turn:
            ctx.append(
                [
                    Message(role="assistant", content=f"Step {turn}: run pytest -k case{turn}."),
                    Message(role="user", content=f"case{turn}: 1 failed, 3 passed"),
                ],
                turn=turn,
                elidable=[False, True],
            )
        r = ctx.render(turn=turn, turns_left=4 - turn)
        request = r.build_request(model=MODEL, stream=False, max_tokens=1)
        started = time.perf_counter()
        response = http.post(llama_url + "/v1/chat/completions", json=request.wire_body())
        seconds.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
        reported.append(response.json()["usage"]["prompt_tokens"])
        rendered.append(r)
        prompts.append(PromptBytes.from_request(request, tail_messages=1))
    # Our estimate (server tokenizer + template allowance + margin) bounds the server's own count.
    for r, n in zip(rendered, reported, strict=True):
        assert 0 < n <= r.prompt_tokens_estimate
        assert ctx.calibrate(r, reported_prompt_tokens=n).outcome == "within_margin"
    assert reported == sorted(reported) and reported[0] > 300
    assert all(t.extends_stable for t in prefix_report(prompts).turns)
    # Turn 0 prefills ~400 cold tokens; later turns only their new suffix. Another
    # client's requests in between could evict the single cache slot, so compare
    # against the cheapest later turn rather than every one.
    assert min(seconds[1:]) < seconds[0] / 2, seconds
