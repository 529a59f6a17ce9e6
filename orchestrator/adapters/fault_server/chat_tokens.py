"""A toy engine tokenizer and chat template, so the fault server can pose as
vLLM's ``/tokenize`` (render and tokenize in one call). Pure: no I/O.

The template is ChatML; its two markers are one id each and every other
character is its code point, so a test writes a reply's sampled ids as
``ids(text)``. ``drops_past_answers`` renders every answer but the last as
a placeholder, as templates that strip past reasoning do (not
prefix-preserving)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

ChatTemplate = Literal["chatml", "drops_past_answers"]
SPECIAL = {"<|im_start|>": 200_000, "<|im_end|>": 200_001}
MAX_MODEL_LEN = 32_768


def ids(text: str) -> list[int]:
    """``text`` as the toy tokenizer reads it."""
    out: list[int] = []
    at = 0
    while at < len(text):
        marker = next((m for m in SPECIAL if text.startswith(m, at)), None)
        if marker is not None:
            out.append(SPECIAL[marker])
            at += len(marker)
        else:
            out.append(ord(text[at]))
            at += 1
    return out


def render(messages: Sequence[Any], template: ChatTemplate, *, generation_prompt: bool = True) -> str:
    shown = [m for m in messages if isinstance(m, dict)]
    out = []
    for i, message in enumerate(shown):
        content = message.get("content") if isinstance(message.get("content"), str) else ""
        if template == "drops_past_answers" and message.get("role") == "assistant" and i != len(shown) - 1:
            content = "(an earlier answer)"
        out.append(f"<|im_start|>{message.get('role')}\n{content}<|im_end|>\n")
    return "".join(out) + ("<|im_start|>assistant\n" if generation_prompt else "")


def tokenize(body: dict[str, Any], template: ChatTemplate) -> dict[str, Any]:
    """vLLM's ``/tokenize`` answer to a body with ``messages`` (rendered with
    ``add_generation_prompt``) or ``prompt``."""
    if isinstance(body.get("messages"), list):
        text = render(body["messages"], template, generation_prompt=body.get("add_generation_prompt", True) is True)
    else:
        text = str(body.get("prompt", ""))
    tokens = ids(text)
    return {"tokens": tokens, "count": len(tokens), "max_model_len": MAX_MODEL_LEN}
