"""Prompt token ids stored linearly: each envelope keeps what its prompt adds
to the run's previous recorded prompt ids (``Envelope.prompt_token_ids_delta``),
and reading a run's responses in chain order puts the whole ids back.

The delta is in the envelope's own JSON, so it is hashed into the chain like
the rest of the envelope, and it names no row: a faithful replay, recording
the same envelopes in the same order, stores the same bytes. A recorder that
has not seen the run's previous prompt (a new process) stores the ids whole;
a delta whose base is missing is left as it is, and its ids read as absent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from orchestrator.canonical import canonical_json
from orchestrator.envelope import Envelope, TokenDelta

DELTA_KEY = "prompt_token_ids_delta"
MIN_KEEP = 1
"""A delta that keeps nothing is stored whole: it would only add a wrapper."""


def common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while hi - lo > 1:  # a[:lo] == b[:lo], a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def compact(envelope: Envelope, previous: tuple[int, ...] | None) -> Envelope:
    """The envelope as stored after a prompt whose ids were ``previous``."""
    ids = envelope.prompt_token_ids
    if ids is None or previous is None:
        return envelope
    keep = common_prefix(previous, ids)
    if keep < MIN_KEEP:
        return envelope
    return envelope.model_copy(update={"prompt_token_ids": None,
                                       DELTA_KEY: TokenDelta(keep=keep, ids=ids[keep:])})


def expanded(envelope_jsons: Iterable[str]) -> list[str]:
    """Stored envelope texts, in chain order, with every delta whose base is
    known put back as whole ``prompt_token_ids``; other texts unchanged."""
    out: list[str] = []
    previous: list[Any] | None = None
    for text in envelope_jsons:
        if DELTA_KEY not in text and '"prompt_token_ids":[' not in text:
            out.append(text)
            continue
        data = json.loads(text)
        delta = data.get(DELTA_KEY)
        if isinstance(delta, Mapping) and previous is not None and _valid(delta, previous):
            data["prompt_token_ids"] = previous[: delta["keep"]] + list(delta["ids"])
            del data[DELTA_KEY]
            text = canonical_json(data)
        if isinstance(data.get("prompt_token_ids"), list):
            previous = data["prompt_token_ids"]
        out.append(text)
    return out


def _valid(delta: Mapping[str, Any], previous: list[Any]) -> bool:
    keep, ids = delta.get("keep"), delta.get("ids")
    return isinstance(keep, int) and 0 <= keep <= len(previous) and isinstance(ids, list)


def expand_rows(rows: Sequence[Mapping[Any, Any]]) -> list[dict[Any, Any]]:
    """Response rows (one run's, any order) with their envelopes expanded; in seq order."""
    ordered = sorted(rows, key=lambda r: r["seq"])
    texts = expanded(r["envelope_json"] for r in ordered)
    return [{**r, "envelope_json": t} for r, t in zip(ordered, texts, strict=True)]
