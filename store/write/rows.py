"""Pure builders: contract objects in, row dicts (keyed by column name) out.

Nothing here touches a database. The writer adds ``seq`` and ``chain_hash``;
``normalise`` gives every row the exact Python types its columns read back
as, so the hash computed at write time is the hash recomputed at verify time.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from pydantic import BaseModel
from sqlalchemy import Float, Integer, Table

from orchestrator.canonical import canonical_json, sha256_hex, text_bytes
from orchestrator.contract import Captured, Message, ModelRequest, ToolCall
from orchestrator.envelope import Envelope
from store.chain import GENESIS_COLUMNS, genesis
from store.schema.tables import (
    CallAttempt,
    CandidateRow,
    EventRow,
    ModelCall,
    ModelResponse,
    Run,
    ToolExecution,
    TransitionRow,
    Turn,
    table_of,
)
from store.write import blobs
from store.write.blobs import History

Pending = tuple[Table, dict[str, Any]]


def new_run_id() -> str:
    return uuid.uuid4().hex


def new_row_id() -> str:
    """Time-ordered (48-bit milliseconds, then 80 random bits) so inserts stay
    local in the primary-key index."""
    return f"{int(time.time() * 1000):012x}{os.urandom(10).hex()}"


def normalise(table: Table, values: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(values) - set(table.columns.keys())
    if unknown:
        raise KeyError(f"{table.name} has no columns {sorted(unknown)}")
    out: dict[str, Any] = {}
    for column in table.columns:
        value = values.get(column.name)
        if value is not None and isinstance(column.type, Float):
            value = float(value)
        elif value is not None and isinstance(column.type, Integer):
            value = int(value)
        out[column.name] = value
    return out


def as_json_text(value: Any) -> str:
    """Canonical JSON text of a value; a string is taken as JSON already and
    re-canonicalised when it parses, kept verbatim when it does not."""
    if isinstance(value, BaseModel):
        return canonical_json(value.model_dump(mode="json"))
    if isinstance(value, str):
        try:
            return canonical_json(json.loads(value))
        except ValueError:
            return value
    return canonical_json(value)


Output = str | bytes | Captured | None


def capped(data: Output, cap: int) -> tuple[str, int, str]:
    """(text kept, original size in bytes, sha256 of the original)."""
    if data is not None and not isinstance(data, (str, bytes)):
        return data.text(), data.total_bytes, data.sha256
    raw = text_bytes(data) if isinstance(data, str) else (data or b"")
    if isinstance(data, str) and len(raw) <= cap:
        return data, len(raw), sha256_hex(raw)  # whole: kept exactly, lone surrogates too
    return raw[:cap].decode("utf-8", errors="replace"), len(raw), sha256_hex(raw)


def run_row(
    *, run_id: str, now: float, task: str, repo: str, config: Mapping[str, Any], policy: Mapping[str, Any],
    model: str, mode: str, parent_run_id: str | None, forked_at_turn: int | None, version: str,
) -> dict[str, Any]:
    row = normalise(table_of(Run), {
        "id": run_id, "created_at": now, "task": task, "repo": repo, "mode": mode,
        "gen_ai.request.model": model, "config_json": canonical_json(dict(config)),
        "policy_json": canonical_json(dict(policy)), "parent_run_id": parent_run_id,
        "forked_at_turn": forked_at_turn, "escrow_version": version, "status": "running", "chain_seq": 0,
    })
    row["chain_head"] = genesis(row)
    return row


def genesis_values(run: Mapping[str, Any]) -> dict[str, Any]:
    """The run row's immutable (hashed) columns, as the genesis event records them."""
    return {k: run.get(k) for k in GENESIS_COLUMNS}


class StoredRequest(NamedTuple):
    row: Pending
    blobs: dict[str, str]
    history: History | None


def request_row(
    call_id: str, run_id: str, turn: int, request: ModelRequest, attempt_of: str | None, now: float,
    previous: History | None = None,
) -> StoredRequest:
    """The request row, by reference to its messages and tools (store.write.blobs);
    ``previous`` is the run's last message list, which this one extends."""
    s = request.sampling
    dumped = request.model_dump(mode="json")
    canonical = canonical_json(dumped)  # serialised once for its hash; stored by reference
    parts = blobs.split(dumped, previous)
    stored = {"request_json": canonical} if parts is None else {
        "request_json": "", "request_body": parts.body, "request_refs": parts.refs,
    }
    return StoredRequest((table_of(ModelCall), {
        "id": call_id, "run_id": run_id, "turn": turn, "created_at": now, "attempt_of": attempt_of,
        "gen_ai.operation.name": "chat", "gen_ai.request.model": request.model,
        "gen_ai.request.max_tokens": request.max_tokens, "gen_ai.request.temperature": s.temperature,
        "gen_ai.request.top_p": s.top_p, "gen_ai.request.top_k": s.top_k, "gen_ai.request.seed": s.seed,
        "gen_ai.request.stop_sequences": canonical_json(list(request.stop)),
        "sampling_json": as_json_text(s), "deadline_s": request.deadline_s,
        "max_payload_bytes": request.max_payload_bytes, "request_sha256": sha256_hex(canonical), **stored,
    }), parts.blobs if parts else {}, parts.history if parts else None)


def response_rows(
    call_id: str, run_id: str, turn: int | None, envelope: Envelope, cost_usd: float | None, now: float
) -> list[Pending]:
    envelope_json = as_json_text(envelope)
    u, t, err = envelope.usage, envelope.timings, envelope.error
    rows: list[Pending] = [(table_of(ModelResponse), {
        "id": new_row_id(), "run_id": run_id, "turn": turn, "call_id": call_id, "recorded_at": now,
        "status": envelope.status.value,
        "gen_ai.response.finish_reasons": canonical_json([envelope.finish_reason]) if envelope.finish_reason else None,
        "http_status": envelope.http_status, "gen_ai.response.model": envelope.model,
        "openai.response.system_fingerprint": envelope.system_fingerprint, "engine": envelope.engine,
        "gen_ai.usage.input_tokens": u.prompt_tokens, "gen_ai.usage.cache_read.input_tokens": u.cached_prompt_tokens,
        "gen_ai.usage.output_tokens": u.completion_tokens, "input_tokens_source": u.prompt_source,
        "cached_input_tokens_source": u.cached_source, "output_tokens_source": u.completion_source,
        "ttft_s": t.ttft_s, "decode_s": t.decode_s, "total_s": t.total_s, "cost_usd": cost_usd,
        "payload_bytes": envelope.payload_bytes, "error.type": err.kind if err else None,
        "error_message": err.message if err else None, "n_attempts": len(envelope.attempts),
        "envelope_json": envelope_json, "envelope_sha256": sha256_hex(envelope_json),
        "reasoning": envelope.payload.reasoning, "reasoning_tokens": u.reasoning_tokens,
        "reasoning_convention": u.reasoning_convention,
    })]
    for a in envelope.attempts:
        rows.append((table_of(CallAttempt), {
            "id": new_row_id(), "run_id": run_id, "turn": turn, "call_id": call_id, "number": a.number,
            "status": a.status.value, "http_status": a.http_status, "error.type": a.error.kind if a.error else None,
            "error_message": a.error.message if a.error else None, "duration_s": a.duration_s, "backoff_s": a.backoff_s,
        }))
    return rows


def candidate_row(
    candidate_id: str, run_id: str, turn: int | None, call_id: str, index: int, tool_call: Any, now: float
) -> Pending:
    text = as_json_text(tool_call.model_dump(mode="json") if isinstance(tool_call, ToolCall) else tool_call)
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    fields = parsed if isinstance(parsed, dict) else {}
    function: dict[str, Any] = fields["function"] if isinstance(fields.get("function"), dict) else {}
    name = fields.get("name", function.get("name"))
    return table_of(CandidateRow), {
        "id": candidate_id, "run_id": run_id, "turn": turn, "call_id": call_id, "candidate_index": index,
        "gen_ai.tool.call.id": fields.get("id") if isinstance(fields.get("id"), str) else None,
        "gen_ai.tool.name": name if isinstance(name, str) else None, "tool_call_json": text, "created_at": now,
    }


def transition_row(
    run_id: str, turn: int | None, candidate_id: str, from_state: str | None, to_state: str,
    reason: str, layer: str | None, now: float,
) -> Pending:
    return table_of(TransitionRow), {
        "id": new_row_id(), "run_id": run_id, "turn": turn, "candidate_id": candidate_id,
        "from_state": from_state, "to_state": to_state, "layer": layer, "reason": reason, "at": now,
    }


def tool_execution_row(
    run_id: str, turn: int | None, candidate_id: str, *, tool: str, arguments_json: Any, decision: str | None,
    rule: str | None, reason: str | None, exit_code: int | None, stdout: Output, stderr: Output,
    duration_s: float | None, observation: str, cap: int, now: float, ok: bool | None = None,
    detail: Mapping[str, Any] | None = None,
) -> Pending:
    out_text, out_bytes, out_sha = capped(stdout, cap)
    err_text, err_bytes, err_sha = capped(stderr, cap)
    return table_of(ToolExecution), {
        "id": new_row_id(),
        "run_id": run_id,
        "turn": turn,
        "candidate_id": candidate_id,
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.arguments": None if arguments_json is None else as_json_text(arguments_json),
        "decision": decision,
        "rule": rule,
        "reason": reason,
        "ok": ok,
        "exit_code": exit_code,
        "stdout": out_text,
        "stdout_bytes": out_bytes,
        "stdout_sha256": out_sha,
        "stderr": err_text,
        "stderr_bytes": err_bytes,
        "stderr_sha256": err_sha,
        "duration_s": duration_s,
        "gen_ai.tool.call.result": observation,
        "observation_sha256": sha256_hex(observation),
        "detail_json": None if detail is None else canonical_json(dict(detail)),
        "at": now,
    }


def event_row(run_id: str, turn: int | None, kind: str, data: Mapping[str, Any], now: float) -> Pending:
    return table_of(EventRow), {
        "id": new_row_id(), "run_id": run_id, "turn": turn, "kind": kind,
        "data_json": canonical_json(dict(data)), "at": now,
    }


def turn_row(run_id: str, turn: int, n_rows: int, messages: Sequence[Message], now: float) -> Pending:
    return table_of(Turn), {
        "id": new_row_id(), "run_id": run_id, "turn": turn, "committed_at": now, "n_rows": n_rows,
        "messages_json": canonical_json([m.model_dump(mode="json") for m in messages]),
    }
