"""Reading a teacher's answer strictly (``TeacherClient.score``): per engine,
the teacher's logprob of each sampled id, whether it is in the teacher's top
K, and the top K themselves as (id, logprob) in rank order where the engine
names them by id (vLLM, SGLang; llama-cpp-python names them by text: none).

Anything that is not one finite-or-minus-infinity logprob <= 0 per sampled
id, or not at most K (int id, such logprob) entries per position, is
``TeacherAnswerInvalid`` naming what was wrong, never a guess. This runs on
every scored call (bench/bench_teacher.py): plain loops over the decoded
JSON, no model a position.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from orchestrator.errors import TeacherAnswerInvalid

TopK = tuple[tuple[tuple[int, float], ...], ...]
"""Per sampled id, the teacher's best ids with their logprobs, best first."""
Read = tuple[tuple[float, ...], tuple[bool | None, ...], TopK | None]
"""A sampled id's logprob, whether in the top K, the top K (None: not given by id)."""
_FIRST_UNSCORED = 1e-9  # a logprob above 0 by less than this is rounding, not a probability > 1


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _logprob(value: object) -> float | None:
    """A log probability (finite or -inf, at most 0, rounding clamped), else None."""
    number = _number(value)
    if number is None or math.isnan(number) or number > _FIRST_UNSCORED:
        return None
    return min(number, 0.0)


def _checked(values: Sequence[object], where: str) -> tuple[float, ...]:
    out = []
    for i, value in enumerate(values):
        number, logprob = _number(value), _logprob(value)
        if number is None:
            raise TeacherAnswerInvalid(f"{where}: sampled token {i} has no logprob ({value!r})", position=i)
        if logprob is None:
            raise TeacherAnswerInvalid(f"{where}: sampled token {i} has logprob {number!r}, not a log "
                                       "probability (finite or -inf, at most 0)", position=i)
        out.append(logprob)
    return tuple(out)


def _bad_top(where: str, position: int, why: str) -> TeacherAnswerInvalid:
    return TeacherAnswerInvalid(f"{where}: the top K at sampled token {position} {why}", position=position)


def _choice(data: dict[str, Any]) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise TeacherAnswerInvalid("the teacher's answer has no choice")
    return choices[0]


def _count(entries: object, want: int, what: str) -> list[Any]:
    if not isinstance(entries, list):
        raise TeacherAnswerInvalid(f"the teacher's answer has no {what}")
    if len(entries) < want:
        raise TeacherAnswerInvalid(f"the teacher gave {len(entries)} {what} for {want} tokens",
                                   given=len(entries), wanted=want)
    return entries


def _vllm_top(entry: dict[str, Any], k: int, position: int) -> tuple[tuple[int, float], ...]:
    """The entries ranked <= K (the sampled id's own entry among them when it is), best first."""
    ranked = []
    for key, item in entry.items():
        rank = item.get("rank") if isinstance(item, dict) else None
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise _bad_top("vLLM", position, f"has an entry without an integer rank ({key!r}: {item!r})")
        if rank > k:
            continue  # the sampled id's own entry, outside the top K
        if not (key.isascii() and key.isdigit()):
            raise _bad_top("vLLM", position, f"names {key!r}, not a token id")
        logprob = _logprob(item.get("logprob"))
        if logprob is None:
            raise _bad_top("vLLM", position, f"gives id {key} logprob {item.get('logprob')!r}, not a log probability")
        ranked.append((rank, int(key), logprob))
    if len(ranked) > k:
        raise _bad_top("vLLM", position, f"has {len(ranked)} entries ranked within K = {k}")
    ranked.sort()
    return tuple((token, logprob) for _, token, logprob in ranked)


def read_vllm(data: dict[str, Any], ids: list[int], n: int, k: int) -> Read:
    entries = _count(_choice(data).get("prompt_logprobs"), len(ids), "prompt_logprobs")[:len(ids)]
    values: list[object] = []
    in_top: list[bool | None] = []
    top = []
    for position, (token, entry) in enumerate(zip(ids[-n:], entries[-n:], strict=True)):
        own = entry.get(str(token)) if isinstance(entry, dict) else None
        if not isinstance(own, dict):
            raise TeacherAnswerInvalid(f"vLLM's prompt_logprobs hold no entry for id {token}", token=token)
        values.append(own.get("logprob"))
        rank = own.get("rank")
        in_top.append(rank <= k if isinstance(rank, int) and not isinstance(rank, bool) else None)
        top.append(_vllm_top(entry, k, position))
    return _checked(values, "vLLM"), tuple(in_top), tuple(top)


def _sglang_top(top: object, k: int, position: int) -> tuple[tuple[int, float], ...]:
    if not isinstance(top, list):
        raise _bad_top("SGLang", position, f"is not a list ({top!r})")
    if len(top) > k:
        raise _bad_top("SGLang", position, f"has {len(top)} entries for K = {k}")
    out = []
    for item in top:
        if not isinstance(item, list) or len(item) < 2:
            raise _bad_top("SGLang", position, f"has an entry that is not [logprob, id, text] ({item!r})")
        token, logprob = item[1], _logprob(item[0])
        if not isinstance(token, int) or isinstance(token, bool):
            raise _bad_top("SGLang", position, f"names {token!r}, not a token id")
        if logprob is None:
            raise _bad_top("SGLang", position, f"gives id {token} logprob {item[0]!r}, not a log probability")
        out.append((token, logprob))
    return tuple(out)


def read_sglang(data: dict[str, Any], ids: list[int], n: int, k: int) -> Read:
    meta = data.get("meta_info")
    if not isinstance(meta, dict):
        raise TeacherAnswerInvalid("SGLang's answer has no meta_info")
    entries = _count(meta.get("input_token_logprobs"), len(ids), "input_token_logprobs")[:len(ids)]
    values: list[object] = []
    for token, entry in zip(ids[-n:], entries[-n:], strict=True):
        if not isinstance(entry, list) or len(entry) < 2 or entry[1] != token:
            raise TeacherAnswerInvalid(f"SGLang's input_token_logprobs do not name id {token} where it was sent "
                                       f"({entry!r}): misaligned", token=token)
        values.append(entry[0])
    logprobs = _checked(values, "SGLang")
    tops = meta.get("input_top_logprobs")
    if tops is None:
        return logprobs, (None,) * n, None
    tops = _count(tops, len(ids), "input_top_logprobs")[len(ids) - n:len(ids)]
    top = tuple(_sglang_top(entry, k, position) for position, entry in enumerate(tops))
    in_top = tuple(any(t == token for t, _ in best) for token, best in zip(ids[-n:], top, strict=True))
    return logprobs, in_top, top


def read_echo(data: dict[str, Any], echoed: int, n: int, k: int) -> Read:
    logprobs = _choice(data).get("logprobs")
    if not isinstance(logprobs, dict):
        raise TeacherAnswerInvalid("llama-cpp-python's answer has no logprobs")
    # Every prompt id but the BOS is echoed, then the one generated token.
    values = _count(logprobs.get("token_logprobs"), echoed, "token_logprobs")[echoed - n:echoed]
    checked = _checked(values, "llama-cpp-python")
    tops = logprobs.get("top_logprobs")
    in_top: list[bool | None] = [None] * n
    if isinstance(tops, list) and len(tops) >= echoed:
        for i, (value, top) in enumerate(zip(checked, tops[echoed - n:echoed], strict=True)):
            if isinstance(top, dict) and top:
                # Keyed by text, not ids: the top K and, when it is not among
                # them, the sampled token; it is in the top K when its logprob
                # reaches the K-th best. Text names no id, so no top K is kept.
                ranked = sorted((float(v) for v in top.values() if _number(v) is not None), reverse=True)
                in_top[i] = bool(ranked) and value >= ranked[min(k, len(ranked)) - 1]
    return checked, tuple(in_top), None
