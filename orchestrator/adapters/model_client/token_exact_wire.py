"""The token-in loop's wire: the body each engine takes a prompt of ids in
(llama-server's ``/completion``, vLLM's ``/v1/completions``, SGLang's
``/generate``) and the reading of each one's answer, normalised to the chat
endpoint's logprob entries (``orchestrator.adapters.model_client.token_exact``)."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from orchestrator.contract import ModelRequest
from orchestrator.token_drift import first_difference

_FINISH = {"eos": "stop", "word": "stop", "limit": "length"}


class EngineAnswer(NamedTuple):
    """An engine's answer to a prompt of ids, read from its own shape."""

    text: str
    sampled: tuple[int, ...]
    logprobs: list[dict[str, Any]] | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached: int | None
    finish: str | None
    model: str | None


def _sampling(request: ModelRequest, body: dict[str, Any]) -> dict[str, Any]:
    for key in ("temperature", "top_p", "top_k", "seed"):
        if getattr(request.sampling, key) is not None:
            body[key] = getattr(request.sampling, key)
    if request.constraint is not None and request.constraint.kind == "grammar":
        body.update(request.constraint.fields)  # the engine's own field, as chat sends it
    return body


def _llama_body(request: ModelRequest, ids: tuple[int, ...]) -> dict[str, Any]:
    body: dict[str, Any] = {"prompt": list(ids), "n_predict": request.max_tokens, "stream": False,
                            "return_tokens": True, "cache_prompt": True}
    if request.sampling.logprobs:
        body["n_probs"] = max(1, request.sampling.top_logprobs or 1)
    return _sampling(request, body)


def _vllm_body(request: ModelRequest, ids: tuple[int, ...]) -> dict[str, Any]:
    # A logprob per sampled id always: a trainer reads them (vLLM sends the
    # sampled token's logprob besides the top ``logprobs``).
    top = max(1, request.sampling.top_logprobs or 1) if request.sampling.logprobs else 1
    return _sampling(request, {"model": request.model, "prompt": list(ids), "max_tokens": request.max_tokens,
                               "stream": False, "return_token_ids": True, "logprobs": top})


def _sglang_body(request: ModelRequest, ids: tuple[int, ...]) -> dict[str, Any]:
    # A logprob per sampled id always (``output_token_logprobs``); the seed
    # is not sent: ``/generate`` names it differently across versions.
    params: dict[str, Any] = {"max_new_tokens": request.max_tokens}
    for key in ("temperature", "top_p", "top_k"):
        if getattr(request.sampling, key) is not None:
            params[key] = getattr(request.sampling, key)
    if request.constraint is not None and request.constraint.kind == "grammar":
        params.update(request.constraint.fields)  # ``ebnf``: a sampling parameter of /generate
    top = max(1, request.sampling.top_logprobs or 1) if request.sampling.logprobs else 0
    return {"input_ids": list(ids), "sampling_params": params, "return_logprob": True,
            "top_logprobs_num": top, "stream": False}


_BODIES = {"vllm": _vllm_body, "sglang": _sglang_body}
_PATHS = {"vllm": "/v1/completions", "sglang": "/generate"}


def answer_path(engine: str) -> str:
    """The path, under the engine's root, that takes a prompt of ids."""
    return _PATHS.get(engine, "/completion")


def request_body(engine: str, request: ModelRequest, ids: tuple[int, ...]) -> dict[str, Any]:
    """``request`` with the prompt ``ids``, in ``engine``'s own body."""
    return _BODIES.get(engine, _llama_body)(request, ids)


def read_answer(engine: str, data: dict[str, Any], request: ModelRequest,
                sent: tuple[int, ...]) -> EngineAnswer | str:
    """``engine``'s answer to the prompt ``sent``, or what is wrong with it."""
    if engine == "vllm":
        return _read_vllm(data, sent)
    return _read_sglang(data, request) if engine == "sglang" else _read_llama(data, request)


def _triples(value: object) -> list[tuple[float, int, str | None]] | None:
    """SGLang's logprob entries, ``[logprob, id, text or null]`` each; None
    when any is another shape."""
    if not isinstance(value, list):
        return None
    out = []
    for entry in value:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 3 and isinstance(entry[0], (int, float))
                and not isinstance(entry[0], bool) and _ids([entry[1]])
                and (entry[2] is None or isinstance(entry[2], str))):
            return None
        out.append((float(entry[0]), int(entry[1]), entry[2]))
    return out


def _read_sglang(data: dict[str, Any], request: ModelRequest) -> EngineAnswer | str:
    """SGLang's ``/generate`` answer: ``text``, the sampled ``output_ids``
    and ``meta_info`` (``prompt_tokens``, ``completion_tokens``,
    ``cached_tokens``, ``finish_reason`` as ``{"type": ...}``,
    ``output_token_logprobs`` and ``output_top_logprobs`` as ``[logprob,
    id, text]`` triples), normalised to the chat endpoint's entries (with
    each id)."""
    text, sampled, meta = data.get("text"), data.get("output_ids"), data.get("meta_info")
    if not isinstance(text, str) or not _ids(sampled) or not isinstance(meta, dict):
        return "answered without its text, sampled ids and meta_info (text, output_ids, meta_info)"
    assert isinstance(sampled, list)
    finish = meta.get("finish_reason")
    kind = finish.get("type") if isinstance(finish, dict) else None
    if kind not in ("stop", "length"):
        return f"ended without a finish reason stop or length (meta_info.finish_reason {finish!r})"
    entries = _triples(meta.get("output_token_logprobs"))
    if entries is None:
        return "answered no readable logprobs (meta_info.output_token_logprobs: [logprob, id, text] each)"
    if len(entries) != len(sampled):
        return f"answered {len(entries)} logprobs for {len(sampled)} sampled ids (meta_info.output_token_logprobs)"
    named = [i for _, i, _ in entries]
    if named != sampled:
        at = first_difference(named, sampled)
        return (f"answered logprobs for other ids than output_ids (from position {at}: {named[at]} for "
                f"{sampled[at]}): the logprobs would not be the sampled tokens'")
    tops = meta.get("output_top_logprobs")
    tops = tops if isinstance(tops, list) and len(tops) == len(entries) else [None] * len(entries)
    logprobs = [{"token": t or "", "logprob": v, "id": i,
                 "top_logprobs": [{"token": tt or "", "logprob": tv, "id": ti} for tv, ti, tt in _triples(top) or ()]}
                for (v, i, t), top in zip(entries, tops, strict=True)] if request.sampling.logprobs else None
    return EngineAnswer(text=text, sampled=tuple(sampled), logprobs=logprobs,
                   prompt_tokens=_count(meta.get("prompt_tokens")),
                   completion_tokens=_count(meta.get("completion_tokens")),
                   cached=_count(meta.get("cached_tokens")), finish=kind,
                   model=None)


def _read_llama(data: dict[str, Any], request: ModelRequest) -> EngineAnswer | str:
    content, sampled = data.get("content"), data.get("tokens")
    if not isinstance(content, str) or not _ids(sampled):
        return "answered without its text and sampled ids (content, tokens)"
    assert isinstance(sampled, list)
    timings = data.get("timings") if isinstance(data.get("timings"), dict) else {}
    probs = data.get("completion_probabilities") if request.sampling.logprobs else None
    return EngineAnswer(text=content, sampled=tuple(sampled), logprobs=probs if isinstance(probs, list) else None,
                   prompt_tokens=_count(data.get("tokens_evaluated")),
                   completion_tokens=_count(data.get("tokens_predicted")),
                   cached=_count(timings.get("cache_n")) if isinstance(timings, dict) else None,
                   finish=_FINISH.get(str(data.get("stop_type"))),
                   model=data.get("model") if isinstance(data.get("model"), str) else None)


def _read_vllm(data: dict[str, Any], sent: tuple[int, ...]) -> EngineAnswer | str:
    """vLLM's ``/v1/completions`` answer: ``choices[0]`` holds the text, the
    sampled ``token_ids``, the ``prompt_token_ids`` it read and ``logprobs``
    (``tokens``, ``token_logprobs``, ``top_logprobs``), normalised to the
    chat endpoint's entries (``token``, ``logprob``, ``top_logprobs``)."""
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    text, sampled, read = choice.get("text"), choice.get("token_ids"), choice.get("prompt_token_ids")
    if not isinstance(text, str) or not _ids(sampled):
        return "answered without its text and sampled ids (choices[0].text, token_ids: vLLM >= 0.10.2)"
    assert isinstance(sampled, list)
    if read is not None and (not _ids(read) or tuple(read) != sent):
        at = first_difference(tuple(read), sent) if _ids(read) else 0
        return (f"read other prompt ids than were sent (prompt_token_ids differ from position {at}): "
                f"the sampled ids would not follow the prompt recorded")
    logprobs = choice.get("logprobs") if isinstance(choice.get("logprobs"), dict) else {}
    assert isinstance(logprobs, dict)
    tokens, values, tops = (logprobs.get(k) for k in ("tokens", "token_logprobs", "top_logprobs"))
    if not isinstance(tokens, list) or not isinstance(values, list) or not len(tokens) == len(values) == len(sampled):
        given = len(values) if isinstance(values, list) else "no"
        return f"answered {given} logprobs for {len(sampled)} sampled ids (choices[0].logprobs.token_logprobs)"
    entries = [{"token": t, "logprob": v,
                "top_logprobs": [{"token": k, "logprob": p} for k, p in top.items()] if isinstance(top, dict) else []}
               for t, v, top in zip(tokens, values, tops if isinstance(tops, list) else [None] * len(tokens),
                                    strict=False)]
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    details = usage.get("prompt_tokens_details")
    finish = choice.get("finish_reason")
    return EngineAnswer(text=text, sampled=tuple(sampled), logprobs=entries,
                   prompt_tokens=_count(usage.get("prompt_tokens")),
                   completion_tokens=_count(usage.get("completion_tokens")),
                   cached=_count(details.get("cached_tokens")) if isinstance(details, dict) else None,
                   finish=finish if finish in ("stop", "length") else None,
                   model=data.get("model") if isinstance(data.get("model"), str) else None)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ids(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)


def json_object(text: str) -> dict[str, Any]:
    """``text`` as a JSON object; empty when it is none."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
