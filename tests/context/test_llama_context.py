"""Context assembly against the real llama.cpp server (llama-cpp-python)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from orchestrator.adapters.model_client.server_tokenizer import discover_context_window, probe_server_tokenizer
from orchestrator.context import Budget, ContextAssembler, PromptBytes, prefix_report
from orchestrator.contract import Message
from tests.conftest import require
from tests.llama_server import available as llama_server_available
from tests.llama_server import llama_server

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
def test_stable_layout_makes_later_turns_cheaper(llama_url, http, tmp_path):
    tok = probe_server_tokenizer(llama_url + "/v1", model=MODEL, http=http)
    # A fresh nonce first, so no earlier request's cache serves turn 0; gemma's
    # template drops system messages, hence system_role="user".
    ctx = ContextAssembler(system=f"run {uuid.uuid4()}\n{PREAMBLE}", task="Make tests/test_parse.py pass.", tools=(),
                  budget=Budget(s_max=8192, k_max=8), counter=tok, system_role="user")
    reported, rendered, prompts, bodies = [], [], [], []
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
        bodies.append(request.wire_body())
        response = http.post(llama_url + "/v1/chat/completions", json=bodies[-1])
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
    # Turn 0 prefills ~400 cold tokens; later turns only their new suffix. Said
    # by the engine, not timed: llama.cpp's own server (a private one, so no
    # other client shares its cache) reports the prompt tokens it took from its
    # cache (cache_n) and those it prefilled (prompt_n) for the same requests.
    require(llama_server_available(), "llama-server (scripts/setup.sh escrow_setup_llama_server)")
    with llama_server(tmp_path / "llama-server.log") as url:
        timings = []
        for body in bodies:
            response = http.post(url + "/v1/chat/completions", json={**body, "cache_prompt": True})
            assert response.status_code == 200, response.text
            timings.append(response.json()["timings"])
    cold = timings[0]["prompt_n"]
    assert timings[0]["cache_n"] == 0 and cold > 300, timings[0]
    for t in timings[1:]:
        assert t["cache_n"] >= cold - 40 and t["prompt_n"] < cold / 4, timings
