"""Engine provenance: identification from each engine's own endpoints
(pure), the probe over loopback HTTP, and the local llama.cpp server."""

from __future__ import annotations

import pytest

from orchestrator.adapters.fault_server import FaultServer, Reply
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.adapters.model_client.provenance import identify
from tests.client.conftest import make_request

LLAMA_PROPS = {"build_info": "b6510-703f9e32", "total_slots": 1,
               "default_generation_settings": {"n_ctx": 4096, "params": {"cache_prompt": True}}}

CASES = {
    "vllm": (
        {
            "vllm_version": {"version": "0.10.1.1"},
            "models": {"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 32768}]},
        },
        None,
        ("vllm", "0.10.1.1", {"context_length": 32768}),
    ),
    "vllm-models-only": ({"models": {"data": [{"id": "m", "owned_by": "vllm"}]}}, None, ("vllm", None, {})),
    "llama.cpp": ({"llama_props": LLAMA_PROPS}, None,
                  ("llama.cpp", "b6510-703f9e32", {"context_length": 4096, "slots": 1, "prefix_caching": True})),
    "llama.cpp-logprobs-mode": ({"llama_props": {"build_info": "b11434-unknown", "default_generation_settings": {
        "n_ctx": 2048, "params": {"post_sampling_probs": True}}}}, None,
        ("llama.cpp", "b11434-unknown", {"context_length": 2048, "logprobs_mode": "post_sampling"})),
    "llama.cpp-fingerprint": ({}, "b6097-9515c613", ("llama.cpp", "b6097-9515c613", {})),
    "sglang": (
        {
            "sglang_info": {"version": "0.4.9", "context_length": 8192, "disable_radix_cache": True},
            "vllm_version": {"version": "0.4.9"},
        },
        None,
        ("sglang", "0.4.9", {"context_length": 8192, "prefix_caching": False}),
    ),
    "ollama": ({"ollama_version": {"version": "0.11.4"}}, None, ("ollama", "0.11.4", {})),
    "llama-cpp-python": (
        {"models": {"data": [{"id": "gemma", "owned_by": "me"}]}},
        None,
        ("llama-cpp-python", None, {}),
    ),
    "unknown": ({"models": {"data": [{"id": "x", "owned_by": "acme"}]}}, "fp_abc", ("openai-compatible", None, {})),
}


@pytest.mark.parametrize("case", list(CASES), ids=str)
def test_identify(case):
    answers, fingerprint, (engine, version, settings) = CASES[case]
    info = identify(answers, fingerprint=fingerprint)
    assert (info.engine, info.version, info.settings) == (engine, version, settings)
    assert info.evidence


def test_probe_over_http_names_the_engine_on_every_envelope():
    with FaultServer(endpoints={"/props": LLAMA_PROPS}, default=Reply(text="hi")) as srv:
        with ModelClient(srv.base_url, token_estimator=lambda t: len(t.split())) as client:
            before = client.call(make_request())
            info = client.engine_info()
            after = client.call(make_request())
    assert before.engine == "escrow-fault-server"  # the Server header, before the probe
    assert (info.engine, info.version, info.settings["context_length"]) == ("llama.cpp", "b6510-703f9e32", 4096)
    assert after.engine == "llama.cpp b6510-703f9e32"


def test_an_unreachable_server_is_unknown_not_an_error():
    with ModelClient("http://127.0.0.1:9/v1") as client:
        info = client.engine_info()
    assert (info.engine, info.reachable) == ("openai-compatible", False)


def test_the_local_llama_server_is_identified(llama_url):
    with ModelClient(f"{llama_url}/v1") as client:
        info = client.engine_info()
    assert info.engine in ("llama-cpp-python", "llama.cpp"), info
