"""A model's own chat template, read from its Hugging Face tokenizer files
and rendered here, for engines that render none over HTTP (SGLang's
``/tokenize`` takes text, never messages).

The files are the ones the engine loaded: ``chat_template.jinja`` or
``tokenizer_config.json``'s ``chat_template`` in the directory SGLang's
``/get_model_info`` names (``tokenizer_path``, else ``model_path``). The
template is rendered as ``transformers``' ``apply_chat_template`` renders
it: a sandboxed Jinja environment with ``trim_blocks`` and
``lstrip_blocks``, ``raise_exception`` and ``tojson``, the special tokens
(``bos_token``, ``eos_token``...) as variables. A directory that is not
readable from here (the engine on another machine, a hub id) is a
``TokenizerError`` naming it: the template is never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from orchestrator.errors import TokenizerError

_SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token")


class ChatTemplate:
    """``source`` (Jinja) rendered with ``special`` tokens as variables."""

    def __init__(self, source: str, special: dict[str, str] | None = None, *, where: str = "") -> None:
        self.where = where
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
        try:
            self._template = env.from_string(source)
        except TemplateError as exc:
            raise TokenizerError(f"the chat template in {where} does not parse: {exc}", path=where) from exc
        self.special = dict(special or {})

    def render(self, messages: Sequence[dict[str, Any]], *, generation_prompt: bool = True) -> str:
        try:
            return self._template.render(messages=list(messages), add_generation_prompt=generation_prompt,
                                         **self.special)
        except TemplateError as exc:
            raise TokenizerError(f"the chat template in {self.where} failed to render: {exc}",
                                 path=self.where) from exc

    @classmethod
    def from_dir(cls, directory: str) -> "ChatTemplate":
        """The template of the tokenizer files in ``directory``."""
        root = Path(directory)
        config_file = root / "tokenizer_config.json"
        if not root.is_dir():
            raise TokenizerError(
                f"the model's tokenizer files ({directory}) are not a directory readable here: the engine renders "
                "no chat template over HTTP, so --token-exact reads the model's own template from them",
                path=directory)
        try:
            config = json.loads(config_file.read_text()) if config_file.is_file() else {}
        except (OSError, ValueError) as exc:
            raise TokenizerError(f"{config_file} is not readable JSON: {exc}", path=str(config_file)) from exc
        config = config if isinstance(config, dict) else {}
        jinja = root / "chat_template.jinja"
        source: Any = jinja.read_text() if jinja.is_file() else config.get("chat_template")
        if isinstance(source, list):  # several named templates: the default one
            source = next((t.get("template") for t in source if isinstance(t, dict) and t.get("name") == "default"),
                          None)
        if not isinstance(source, str) or not source:
            raise TokenizerError(f"no chat template in {directory} (chat_template.jinja, tokenizer_config.json)",
                                 path=directory)
        special = {k: _token_text(config.get(k)) for k in _SPECIAL}
        return cls(source, {k: v for k, v in special.items() if v is not None}, where=directory)


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # an AddedToken written out: {"content": "<s>", ...}
        value = value.get("content")
    return value if isinstance(value, str) else None


def _raise(message: str) -> None:
    raise TemplateError(message)
