"""SGLang's native ``/generate`` answer to a prompt of ids, in SGLang's own
shape (its native API doc, ``io_struct.py::GenerateReqInput``). Pure: no I/O.

A script step's ``completion_token_ids`` are sent as ``output_ids`` and as
the ids of ``meta_info.output_token_logprobs`` (``[logprob, id, text]``
each; text null as SGLang sends it without ``return_text_in_logprobs``);
``prompt_token_ids`` give ``meta_info.prompt_tokens`` (else the ids sent);
``usage`` as a dict overrides ``prompt_tokens``/``completion_tokens``/
``cached_tokens``. Faults in the answer's shape are ``RawResponse`` steps."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.adapters.fault_server.chat_tokens import ids as text_ids
from orchestrator.adapters.fault_server.scenario import Reply

PATH = "/generate"
_FINISH = {"stop": "stop", "length": "length"}


def generate_body(reply: Reply, body: dict[str, Any], index: int) -> tuple[bytes, int]:
    sampled = reply.completion_token_ids if reply.completion_token_ids is not None else text_ids(reply.text)
    sent = body.get("input_ids")
    prompt = reply.prompt_token_ids if reply.prompt_token_ids is not None else (
        sent if isinstance(sent, list) else [])
    kind = _FINISH.get(reply.effective_finish_reason, reply.effective_finish_reason)
    finish: dict[str, Any] = {"type": kind, "length": len(sampled)} if kind == "length" else {
        "type": kind, "matched": sampled[-1] if sampled else None}
    meta: dict[str, Any] = {"id": f"fault-{index}", "finish_reason": finish, "prompt_tokens": len(prompt),
                            "completion_tokens": len(sampled), "cached_tokens": reply.cached_tokens or 0}
    if isinstance(reply.usage, dict):
        meta.update({k: v for k, v in reply.usage.items()
                     if k in ("prompt_tokens", "completion_tokens", "cached_tokens")})
    if body.get("return_logprob"):
        k = body.get("top_logprobs_num") if isinstance(body.get("top_logprobs_num"), int) else 0
        meta["output_token_logprobs"] = [[-0.25, i, None] for i in sampled]
        if k:
            meta["output_top_logprobs"] = [[[-0.25 - n, i + n, None] for n in range(k)] for i in sampled]
    out = {"text": reply.text, "output_ids": sampled, "meta_info": meta}
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False).encode(), len(sampled)
