"""The model server's own tokenizer and window, over HTTP.

Two dialects are known:

* llama-cpp-python's server: ``POST /extras/tokenize/count {"input": text}``
  -> ``{"count": N}``. It tokenizes with BOS, so the count of "" is measured
  once and subtracted. It reports no context window anywhere (``/v1/models``
  carries only the alias), so S_max must come from the settings.
* vLLM: ``POST /tokenize {"model", "prompt", "add_special_tokens": false}``
  at the server root -> ``{"count", "max_model_len", ...}``; ``/v1/models``
  also carries ``max_model_len``.

Only this module imports httpx; the rest of the package sees a TokenCounter.
"""

from __future__ import annotations

from typing import Literal

import httpx

from orchestrator.context.tokenizer import TiktokenCounter, TokenCounter, resolve_counter
from orchestrator.errors import TokenizerError

Dialect = Literal["llama_cpp", "vllm"]


def server_root(base_url: str) -> str:
    """``http://host:port/v1`` -> ``http://host:port``: the tokenizers live at the root."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


class ServerTokenizer:
    """Counts tokens with the server's tokenizer; one HTTP call per text."""

    def __init__(self, base_url: str, *, model: str, dialect: Dialect, http: httpx.Client) -> None:
        self.root = server_root(base_url)
        self.model = model
        self.dialect = dialect
        self._http = http
        self._baseline = 0
        self._baseline = self.count("")

    @property
    def name(self) -> str:
        return f"server:{self.dialect}:{self.model}"

    def _post(self, path: str, body: dict) -> dict:
        try:
            response = self._http.post(self.root + path, json=body)
        except httpx.HTTPError as exc:
            raise TokenizerError(f"server tokenizer at {self.root}{path} unreachable: {exc}", url=self.root) from exc
        if response.status_code != 200:
            raise TokenizerError(
                f"server tokenizer at {self.root}{path} answered HTTP {response.status_code}",
                url=self.root,
                status=response.status_code,
            )
        try:
            return response.json()
        except ValueError as exc:
            raise TokenizerError(f"server tokenizer at {self.root}{path} sent invalid JSON", url=self.root) from exc

    def count(self, text: str) -> int:
        if self.dialect == "llama_cpp":
            data = self._post("/extras/tokenize/count", {"input": text, "model": self.model})
        else:
            data = self._post("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": False})
        count = data.get("count")
        if not isinstance(count, int):
            count = len(data.get("tokens") or [])
        return max(0, count - self._baseline)


def probe_server_tokenizer(base_url: str, *, model: str, http: httpx.Client) -> ServerTokenizer:
    """The first dialect the server answers; TokenizerError when it offers none."""
    errors = []
    for dialect in ("llama_cpp", "vllm"):
        try:
            return ServerTokenizer(base_url, model=model, dialect=dialect, http=http)
        except TokenizerError as exc:
            errors.append(f"{dialect}: {exc}")
    raise TokenizerError(f"no tokenizer endpoint at {server_root(base_url)} ({'; '.join(errors)})", url=base_url)


def discover_context_window(base_url: str, *, model: str, http: httpx.Client) -> int | None:
    """The server's window where it reports one (vLLM's max_model_len); None otherwise."""
    try:
        response = http.get(server_root(base_url) + "/v1/models")
        data = response.json().get("data") or [] if response.status_code == 200 else []
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    for entry in data:
        if isinstance(entry, dict) and entry.get("id") == model and isinstance(entry.get("max_model_len"), int):
            return entry["max_model_len"]
    return None


def counter_for(spec: str, *, base_url: str | None, model: str, http: httpx.Client | None) -> TokenCounter:
    """``server``: the server's tokenizer or an error; ``auto``: the server's if it
    has one, else offline cl100k_base; anything else: ``tokenizer.resolve_counter``."""
    if spec in ("server", "auto"):
        if base_url is None or http is None:
            if spec == "server":
                raise TokenizerError("tokenizer 'server' needs a model server URL", tokenizer=spec)
            return TiktokenCounter("cl100k_base")
        try:
            return probe_server_tokenizer(base_url, model=model, http=http)
        except TokenizerError:
            if spec == "server":
                raise
            return TiktokenCounter("cl100k_base")
    return resolve_counter(spec)
