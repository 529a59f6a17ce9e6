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
from orchestrator.token_drift import first_difference

DELTA_KEY = "prompt_token_ids_delta"
MIN_KEEP = 1
"""A delta that keeps nothing is stored whole: it would only add a wrapper."""


def compact(envelope: Envelope, previous: tuple[int, ...] | None) -> Envelope:
    """The envelope as stored after a prompt whose ids were ``previous``."""
    ids = envelope.prompt_token_ids
    if ids is None or previous is None:
        return envelope
    keep = first_difference(previous, ids)
    if keep < MIN_KEEP:
        return envelope
    return envelope.model_copy(update={"prompt_token_ids": None,
                                       DELTA_KEY: TokenDelta(keep=keep, ids=ids[keep:])})


def parsed_in_order(envelope_jsons: Iterable[str]) -> list[tuple[dict[str, Any] | None, tuple[int, ...] | None]]:
    """Each stored envelope text, in chain order, as (its JSON object with
    the prompt-id fields taken out, its whole prompt ids); (None, None) for a
    text that holds no ids (left to the caller as it is). A delta whose base
    is unknown stays in the object, and its ids are None."""
    out: list[tuple[dict[str, Any] | None, tuple[int, ...] | None]] = []
    previous: tuple[int, ...] | None = None
    for text in envelope_jsons:
        if DELTA_KEY not in text and '"prompt_token_ids":[' not in text:
            out.append((None, None))
            continue
        data = json.loads(text)
        ids: tuple[int, ...] | None = None
        delta = data.get(DELTA_KEY)
        if isinstance(delta, Mapping) and previous is not None and _valid(delta, previous):
            ids = previous[: delta["keep"]] + tuple(delta["ids"])
            del data[DELTA_KEY]
        elif isinstance(data.get("prompt_token_ids"), list):
            ids = tuple(data["prompt_token_ids"])
        if ids is not None:
            data["prompt_token_ids"] = None
            previous = ids
        out.append((data, ids))
    return out


def expanded(envelope_jsons: Iterable[str]) -> list[str]:
    """Stored envelope texts, in chain order, with every delta whose base is
    known put back as whole ``prompt_token_ids``; other texts unchanged."""
    texts = list(envelope_jsons)
    out = []
    for text, (data, ids) in zip(texts, parsed_in_order(texts), strict=True):
        if data is None or ids is None:
            out.append(text)
        else:
            out.append(canonical_json({**data, "prompt_token_ids": list(ids)}))
    return out


def _valid(delta: Mapping[str, Any], previous: tuple[int, ...]) -> bool:
    keep, ids = delta.get("keep"), delta.get("ids")
    return isinstance(keep, int) and 0 <= keep <= len(previous) and isinstance(ids, list)


def expand_rows(rows: Sequence[Mapping[Any, Any]]) -> list[dict[Any, Any]]:
    """Response rows (one run's, any order) with their envelopes expanded; in seq order."""
    ordered = sorted(rows, key=lambda r: r["seq"])
    texts = expanded(r["envelope_json"] for r in ordered)
    return [{**r, "envelope_json": t} for r, t in zip(ordered, texts, strict=True)]


def envelopes_in_order(envelope_jsons: Iterable[str]) -> list[Envelope | None]:
    """Stored envelope texts, in chain order, as envelopes with whole prompt
    ids, without writing the ids out as JSON again (``escrow tokens`` on a
    long run); None for a text that does not parse."""
    texts = list(envelope_jsons)
    out: list[Envelope | None] = []
    for text, (data, ids) in zip(texts, parsed_in_order(texts), strict=True):
        try:
            envelope = Envelope.model_validate_json(text) if data is None else Envelope.model_validate(data)
        except ValueError:
            out.append(None)
            continue
        out.append(envelope if ids is None else envelope.model_copy(update={"prompt_token_ids": ids}))
    return out
