"""Typed reading of the per-token logprobs an engine returned. Pure.

The envelope keeps the engine's entries verbatim (``Envelope.logprobs``), so
nothing is lost to a schema; this module reads them. Token ids come from
wherever the engine put them: llama.cpp's ``id`` on each entry, vLLM's
``token_id:N`` tokens (``return_tokens_as_token_ids``), or the choice's
``token_ids`` (vLLM ``return_token_ids``), which the client records as
``Envelope.completion_token_ids``.

llama.cpp answers with ``prob`` and ``top_probs`` (probabilities, not
logprobs) when ``post_sampling_probs`` is set; they are read as their logs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.contract import Frozen

_ID_PREFIX = "token_id:"
# llama.cpp's per-request switch: False (its default) gives the softmax of the
# model's logits before the sampler chain, True the probabilities after it.
LLAMA_POST_SAMPLING = "post_sampling_probs"


def llama_mode(post_sampling: bool) -> str:
    return "post_sampling" if post_sampling else "raw"


def logprobs_mode(extra: Mapping[str, Any], reported: str | None) -> str | None:
    """What a call's logprobs are taken from, and who said so: ``(request)``
    when the request set the engine's switch (llama.cpp ``post_sampling_probs``),
    else ``(engine)`` from the engine's own report (provenance ``logprobs_mode``);
    None when neither tells (vLLM's ``--logprobs-mode`` is a server flag that
    no endpoint reports)."""
    switch = extra.get(LLAMA_POST_SAMPLING)
    if isinstance(switch, bool):
        return f"{llama_mode(switch)} (request)"
    return None if reported is None else f"{reported} (engine)"


class TopLogprob(Frozen):
    token: str
    logprob: float
    token_id: int | None = None


class TokenLogprob(Frozen):
    token: str
    logprob: float
    token_id: int | None = None
    top: tuple[TopLogprob, ...] = ()

    @property
    def key(self) -> int | str:
        """What identifies the token when comparing runs: its id when known."""
        return self.token if self.token_id is None else self.token_id

    def top_keys(self) -> set[int | str]:
        return {t.token if t.token_id is None else t.token_id for t in self.top}


def _token_id(entry: dict[str, Any]) -> int | None:
    value = entry.get("id", entry.get("token_id"))
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    token = entry.get("token")
    if isinstance(token, str) and token.startswith(_ID_PREFIX) and token[len(_ID_PREFIX):].isdigit():
        return int(token[len(_ID_PREFIX):])
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _logprob(entry: dict[str, Any]) -> float:
    value = _number(entry.get("logprob"))
    if value is not None:
        return value
    prob = _number(entry.get("prob"))  # llama.cpp with post_sampling_probs
    return math.log(prob) if prob is not None and prob > 0 else float("-inf")


def read_entry(entry: Any) -> TokenLogprob | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
        return None
    alternatives = entry.get("top_logprobs") or entry.get("top_probs") or ()
    top = tuple(
        TopLogprob(token=t["token"], logprob=_logprob(t), token_id=_token_id(t))
        for t in alternatives if isinstance(t, dict) and isinstance(t.get("token"), str)
    )
    return TokenLogprob(token=entry["token"], logprob=_logprob(entry), token_id=_token_id(entry), top=top)


def read_logprobs(entries: Sequence[Any] | None) -> list[TokenLogprob]:
    """The entries that parse, in order; an unreadable entry ends the list
    (what follows could no longer be aligned with the tokens)."""
    out: list[TokenLogprob] = []
    for entry in entries or ():
        token = read_entry(entry)
        if token is None:
            break
        out.append(token)
    return out


def token_ids(tokens: Sequence[TokenLogprob]) -> list[int] | None:
    """Completion token ids, when every token carries one."""
    ids = [t.token_id for t in tokens if t.token_id is not None]
    return ids if ids and len(ids) == len(tokens) else None


def int_ids(value: object) -> tuple[int, ...] | None:
    """A list of ids as the engine sent it, or None when it is not one
    (a field of another type, or an element that is not an integer): never
    repaired, never guessed."""
    if not isinstance(value, (list, tuple)):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return None
    return tuple(value)
