"""An engine's own tokenizer and chat template, over HTTP, for the token
checks and the token-exact loop.

llama.cpp's ``llama-server``: ``POST /tokenize {"content", "add_special",
"parse_special"}`` -> ``{"tokens": [...]}``, ``POST /detokenize {"tokens"}``
-> ``{"content"}``, ``POST /apply-template {"messages"}`` -> ``{"prompt"}``;
``/v1/models`` carries ``meta.n_vocab``. vLLM: ``POST /detokenize {"model",
"tokens"}`` -> ``{"prompt"}``; ``POST /tokenize`` at the server root renders
and tokenizes in one call (``{"model", "messages", "add_generation_prompt",
"add_special_tokens"}``, or ``{"model", "prompt", ...}`` for text) ->
``{"tokens", "count", "max_model_len"}``. SGLang: ``POST /tokenize
{"prompt", "add_special_tokens"}`` -> ``{"tokens", "count",
"max_model_len"}`` (text only: it renders no template), ``POST /detokenize
{"tokens"}`` -> ``{"text"}``, ``GET /get_model_info`` -> ``{"model_path",
"tokenizer_path", ...}``, whose tokenizer files hold the chat template
(``SGLangTokens``). Each answer is read strictly: anything else is a ``TokenizerError``, never a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from orchestrator.adapters.model_client.chat_template import ChatTemplate
from orchestrator.adapters.model_client.server_tokenizer import server_root
from orchestrator.errors import EscrowError, TokenizerError


def post_object(http: httpx.Client, url: str, body: dict[str, Any], error: type[EscrowError]) -> dict[str, Any]:
    """``body`` POSTed to ``url`` and the JSON object it answers; anything
    else (unreachable, not 200, not JSON, not an object) is ``error``."""
    try:
        response = http.post(url, json=body)
    except httpx.HTTPError as exc:
        raise error(f"{url} unreachable: {exc}", url=url) from exc
    if response.status_code != 200:
        raise error(f"{url} answered HTTP {response.status_code}: {response.text[:200]}", url=url,
                    status=response.status_code)
    try:
        data = response.json()
    except ValueError as exc:
        raise error(f"{url} answered with something that is not JSON", url=url) from exc
    if not isinstance(data, dict):
        raise error(f"{url} answered with a JSON {type(data).__name__}, not an object", url=url)
    return data


class EngineTokens:
    """The tokenizer endpoints of the server at ``base_url`` (with or without ``/v1``)."""

    def __init__(self, base_url: str, *, http: httpx.Client | None = None, model: str | None = None,
                 timeout_s: float = 30.0) -> None:
        self.root = server_root(base_url)
        self.model = model
        self._own = http is None
        self._http = http or httpx.Client(timeout=timeout_s)

    def __enter__(self) -> "EngineTokens":
        return self

    def __exit__(self, *exc: object) -> None:
        if self._own:
            self._http.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return post_object(self._http, self.root + path, body, TokenizerError)

    def detokenize(self, ids: Sequence[int]) -> str:
        body: dict[str, Any] = {"tokens": list(ids)}
        if self.model is not None:
            body["model"] = self.model
        data = self._post("/detokenize", body)
        text = data.get("content", data.get("prompt", data.get("text")))
        if not isinstance(text, str):
            raise TokenizerError(f"{self.root}/detokenize gave no text", url=self.root)
        return text

    def _ids(self, data: dict[str, Any]) -> tuple[int, ...]:
        tokens = data.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise TokenizerError(f"{self.root}/tokenize gave no list of ids", url=self.root)
        return tuple(tokens)

    def _vllm(self, body: dict[str, Any]) -> tuple[int, ...]:
        if self.model is not None:
            body = {"model": self.model, **body}
        return self._ids(self._post("/tokenize", body))

    def tokenize_chat(self, messages: Sequence[dict[str, Any]]) -> tuple[int, ...]:
        """vLLM: the conversation rendered by the engine's template with its
        generation prompt and tokenized, in one call; the template writes its
        own BOS (``add_special_tokens`` false, as vLLM's chat endpoint does)."""
        return self._vllm({"messages": list(messages), "add_generation_prompt": True, "add_special_tokens": False})

    def tokenize_prompt(self, text: str) -> tuple[int, ...]:
        """vLLM: ids of ``text``, no BOS added."""
        return self._vllm({"prompt": text, "add_special_tokens": False})

    def tokenize(self, text: str, *, special: bool = True, bos: bool = False) -> tuple[int, ...]:
        """Ids of ``text``; with ``special``, special tokens written in it
        (``<start_of_turn>``) are read as themselves; ``bos`` adds the
        model's BOS (a conversation's first prompt: llama-server's chat
        endpoint adds it to the rendered template, which holds none)."""
        return self._ids(self._post("/tokenize", {"content": text, "add_special": bos, "parse_special": special}))

    def apply_template(self, messages: Sequence[dict[str, Any]]) -> str:
        """The conversation as the engine's template renders it for the next
        answer (its generation prompt included)."""
        data = self._post("/apply-template", {"messages": list(messages)})
        prompt = data.get("prompt")
        if not isinstance(prompt, str):
            raise TokenizerError(f"{self.root}/apply-template gave no prompt", url=self.root)
        return prompt

    def vocab_size(self) -> int | None:
        """``n_vocab`` where the server reports it (llama-server's ``/v1/models``), else None."""
        try:
            response = self._http.get(self.root + "/v1/models")
            data = response.json() if response.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return None
        for entry in data.get("data") or () if isinstance(data, dict) else ():
            meta = entry.get("meta") if isinstance(entry, dict) else None
            size = meta.get("n_vocab") if isinstance(meta, dict) else None
            if isinstance(size, int) and size > 0:
                return size
        return None


class SGLangTokens(EngineTokens):
    """SGLang's tokenizer over HTTP and the model's chat template rendered
    here from the tokenizer files its ``/get_model_info`` names (SGLang has
    no endpoint that renders a conversation)."""

    def __init__(self, base_url: str, *, http: httpx.Client | None = None, model: str | None = None,
                 timeout_s: float = 30.0) -> None:
        super().__init__(base_url, http=http, model=model, timeout_s=timeout_s)
        self._template: ChatTemplate | None = None

    @classmethod
    def sharing(cls, tokens: EngineTokens) -> "SGLangTokens":
        """The same server's, over ``tokens``' HTTP client."""
        return cls(tokens.root, http=tokens._http, model=tokens.model)

    def template(self) -> ChatTemplate:
        if self._template is None:
            url = self.root + "/get_model_info"
            try:
                response = self._http.get(url)
                data = response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError) as exc:
                raise TokenizerError(f"{url} unreachable or not JSON: {exc}", url=url) from exc
            where = next((data.get(k) for k in ("tokenizer_path", "model_path")
                          if isinstance(data, dict) and isinstance(data.get(k), str)), None)
            if where is None:
                raise TokenizerError(f"{url} named no tokenizer_path or model_path", url=url)
            self._template = ChatTemplate.from_dir(where)
        return self._template

    def apply_template(self, messages: Sequence[dict[str, Any]]) -> str:
        return self.template().render(messages)

    def tokenize(self, text: str, *, special: bool = True, bos: bool = False) -> tuple[int, ...]:
        """Ids of ``text`` (SGLang's tokenizer reads special tokens written
        in text as themselves either way); ``bos`` adds the model's BOS."""
        body: dict[str, Any] = {"prompt": text, "add_special_tokens": bos}
        if self.model is not None:
            body["model"] = self.model
        return self._ids(self._post("/tokenize", body))


class LlamaServerTokens(EngineTokens):
    """llama-server's tokenizer over HTTP, and its chat template (``/props``)
    rendered here once ``adopt_local`` has seen it render probe
    conversations exactly as the server's ``/apply-template`` does: a turn
    then costs one ``/tokenize`` round trip, not two. A template that
    renders otherwise here (llama.cpp's own Jinja differs from Jinja2 in
    corners) stays the server's."""

    def __init__(self, base_url: str, *, http: httpx.Client | None = None, model: str | None = None,
                 timeout_s: float = 30.0) -> None:
        super().__init__(base_url, http=http, model=model, timeout_s=timeout_s)
        self._local: ChatTemplate | None = None
        self._bos = ""  # what the server cuts from a rendering's start: the BOS it adds as an id

    @classmethod
    def sharing(cls, tokens: EngineTokens) -> "LlamaServerTokens":
        """The same server's, over ``tokens``' HTTP client."""
        return cls(tokens.root, http=tokens._http, model=tokens.model)

    @property
    def renders_here(self) -> bool:
        return self._local is not None

    def adopt_local(self, probes: Sequence[Sequence[dict[str, Any]]]) -> str | None:
        """Render from now on here, when every probe renders here as on the
        server; None when adopted, else why not (the server keeps rendering)."""
        url = self.root + "/props"
        try:
            response = self._http.get(url)
            props = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            return f"{url} unreachable or not JSON: {exc}"
        if not isinstance(props, dict) or not isinstance(props.get("chat_template"), str):
            return f"{url} gave no chat_template"
        special = {k: v for k in ("bos_token", "eos_token") if isinstance(v := props.get(k), str)}
        try:
            local = ChatTemplate(props["chat_template"], special, where=url)
            for probe in probes:
                here, there = local.render(probe), super().apply_template(probe)
                bos = special.get("bos_token", "")
                cut = bos if bos and here.startswith(bos) and not there.startswith(bos) else ""
                if here[len(cut):] != there or (probe is not probes[0] and cut != self._bos):
                    return f"the template from {url} renders otherwise here than on the server"
                self._bos = cut
        except TokenizerError as exc:
            self._bos = ""
            return str(exc)
        self._local = local
        return None

    def apply_template(self, messages: Sequence[dict[str, Any]]) -> str:
        if self._local is not None:
            rendered = self._local.render(messages)
            return rendered[len(self._bos):] if rendered.startswith(self._bos) else rendered
        return super().apply_template(messages)
