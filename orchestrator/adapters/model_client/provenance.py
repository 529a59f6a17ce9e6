"""Which engine answers at a URL, and how it is set up.

``identify`` is pure: it reads what the engine's own endpoints said (vLLM
``/version``, llama.cpp ``/props``, SGLang ``/get_server_info``, Ollama
``/api/version``, ``/v1/models``), plus response headers and the
``system_fingerprint``. ``probe`` is the HTTP adapter that asks them, once,
with a short timeout; an endpoint that does not answer is simply absent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from pydantic import Field

from orchestrator.contract import Frozen
from orchestrator.logprobs import LLAMA_POST_SAMPLING, llama_mode

PROBES = {"vllm_version": "/version", "llama_props": "/props", "sglang_info": "/get_server_info",
          "ollama_version": "/api/version", "models": "/v1/models"}
_LLAMA_BUILD = re.compile(r"^b\d+")


class EngineInfo(Frozen):
    """``engine`` is one of ``orchestrator.adapters.model_client.engines.ENGINES`` (or
    ``openai-compatible`` when nothing told them apart); ``settings`` holds
    what the engine reported that can change outputs: ``context_length``,
    ``prefix_caching``, ``logprobs_mode``, ``batch_invariant``, ``slots``.
    ``evidence`` names the signals the identification rests on."""

    engine: str = "openai-compatible"
    version: str | None = None
    settings: dict[str, Any] = {}
    evidence: tuple[str, ...] = ()
    reachable: bool = Field(default=True, description="False when no probe got any HTTP answer.")

    @property
    def label(self) -> str:
        return self.engine if self.version is None else f"{self.engine} {self.version}"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _kept(**settings: Any) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if v is not None}


def identify(answers: Mapping[str, Any], headers: Mapping[str, str] | None = None,
             fingerprint: str | None = None) -> EngineInfo:
    """The engine behind the answers to ``PROBES`` (keyed as there)."""
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    models = [m for m in _dict(answers.get("models")).get("data") or () if isinstance(m, dict)]
    owned = {m.get("owned_by") for m in models}
    sglang = _dict(answers.get("sglang_info"))
    props = _dict(answers.get("llama_props"))
    if sglang:
        return EngineInfo(
            engine="sglang",
            version=sglang.get("version"),
            evidence=("/get_server_info",),
            settings=_kept(
                context_length=sglang.get("context_length"),
                prefix_caching=None if "disable_radix_cache" not in sglang else not sglang["disable_radix_cache"],
                batch_invariant=sglang.get("enable_deterministic_inference"),
            ),
        )
    if props and ("default_generation_settings" in props or "build_info" in props):
        defaults = _dict(props.get("default_generation_settings"))
        params = _dict(defaults.get("params"))
        post_sampling = params.get(LLAMA_POST_SAMPLING)
        return EngineInfo(
            engine="llama.cpp",
            version=props.get("build_info") or fingerprint,
            evidence=("/props",),
            settings=_kept(
                context_length=defaults.get("n_ctx") or props.get("n_ctx"),
                slots=props.get("total_slots"),
                prefix_caching=params.get("cache_prompt"),
                logprobs_mode=llama_mode(post_sampling) if isinstance(post_sampling, bool) else None,
            ),
        )
    ollama = _dict(answers.get("ollama_version"))
    if ollama.get("version"):
        return EngineInfo(engine="ollama", version=ollama["version"], evidence=("/api/version",))
    vllm = _dict(answers.get("vllm_version"))
    if vllm.get("version") or "vllm" in owned:
        lengths = [m["max_model_len"] for m in models if isinstance(m.get("max_model_len"), int)]
        evidence = ("/version",) if vllm.get("version") else ("/v1/models owned_by vllm",)
        return EngineInfo(engine="vllm", version=vllm.get("version"), evidence=evidence,
                          settings=_kept(context_length=lengths[0] if lengths else None))
    if (
        "llamacpp" in owned
        or fingerprint
        and _LLAMA_BUILD.match(fingerprint)
        or headers.get("server", "").startswith("llama.cpp")
    ):
        return EngineInfo(engine="llama.cpp", version=fingerprint, evidence=("fingerprint or owned_by llamacpp",))
    if "me" in owned:  # llama-cpp-python's server lists its models as owned by "me"
        return EngineInfo(engine="llama-cpp-python", evidence=("/v1/models owned_by me",))
    return EngineInfo(evidence=("no engine endpoint answered",))


def probe(base_url: str, http: httpx.Client, *, timeout_s: float = 2.0) -> EngineInfo:
    """Ask each engine endpoint once, all at once (``base_url`` ends in ``/v1``)."""
    root = base_url.rstrip("/").removesuffix("/v1")

    def ask(path: str) -> httpx.Response | None:
        try:
            return http.get(root + path, timeout=timeout_s)
        except httpx.HTTPError:
            return None

    # One round trip's wait for all five rather than five (or five timeouts on a server that hangs).
    with ThreadPoolExecutor(max_workers=len(PROBES)) as pool:
        responses = dict(zip(PROBES, pool.map(ask, PROBES.values()), strict=True))
    answers: dict[str, Any] = {}
    headers: dict[str, str] = {}
    answered = False
    for key, response in responses.items():
        if response is None:
            continue
        answered = True
        if key == "models":
            headers = dict(response.headers)
        if response.status_code == 200:
            try:
                answers[key] = response.json()
            except ValueError:
                pass
    info = identify(answers, headers)
    return info if answered else info.model_copy(update={"reachable": False, "evidence": ("no HTTP answer",)})
