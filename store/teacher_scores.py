"""Teacher scores (schema 13, ``escrow score``): what a run's answered calls
carry to be scored, the rows already written, and one row appended to the
run's chain per scored call, each in its own transaction as soon as the
teacher answered, so a killed scoring loses at most the calls in flight."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, select

from orchestrator.canonical import canonical_json
from orchestrator.envelope import Envelope
from store import writer
from store.tables import ModelResponse, TeacherScoreRow, table_of
from store.token_ids import envelopes_in_order

SCORES = table_of(TeacherScoreRow)


def answered(conn: Connection, run_id: str) -> list[tuple[str, int | None, Envelope]]:
    """The run's answered calls in chain order: (call id, turn, envelope with whole ids)."""
    t = table_of(ModelResponse)
    rows = [dict(r) for r in conn.execute(
        select(t.c.call_id, t.c.turn, t.c.envelope_json).where(t.c.run_id == run_id).order_by(t.c.seq)).mappings()]
    return [(str(row["call_id"]), row["turn"], envelope)
            for row, envelope in zip(rows, envelopes_in_order(r["envelope_json"] for r in rows), strict=True)
            if envelope is not None]


def scores(conn: Connection, run_id: str, teacher_model: str | None = None,
           top_k: int | None = None) -> list[dict[str, Any]]:
    """The run's score rows (of one teacher and K when named), in chain order,
    with ``logprobs`` and ``in_top_k`` parsed."""
    stmt = select(SCORES).where(SCORES.c.run_id == run_id).order_by(SCORES.c.seq)
    if teacher_model is not None:
        stmt = stmt.where(SCORES.c.teacher_model == teacher_model)
    if top_k is not None:
        stmt = stmt.where(SCORES.c.top_k == top_k)
    out = []
    for r in conn.execute(stmt).mappings():
        row = dict(r)
        row["logprobs"] = json.loads(row["logprobs_json"])
        row["in_top_k"] = json.loads(row["in_top_k_json"])
        out.append(row)
    return out


def record(conn: Connection, run_id: str, call_id: str, turn: int | None, *, teacher_model: str,
           teacher_engine: str, top_k: int, request_sha256: str, logprobs: Sequence[float],
           in_top_k: Sequence[bool | None], duration_s: float | None = None,
           at: float | None = None) -> Mapping[str, Any]:
    """Append one call's score to the run's chain (the caller's transaction)."""
    values = {
        "id": f"{call_id}:{request_sha256[:16]}", "call_id": call_id, "turn": turn,
        "teacher_model": teacher_model, "teacher_engine": teacher_engine, "top_k": top_k,
        "request_sha256": request_sha256, "n_tokens": len(logprobs),
        # -inf (a token the teacher gives no chance) is not JSON: written as null.
        "logprobs_json": canonical_json([v if v != float("-inf") else None for v in logprobs]),
        "in_top_k_json": canonical_json(list(in_top_k)), "duration_s": duration_s,
        "at": time.time() if at is None else at,
    }
    (row,) = writer.append(conn, run_id, [(SCORES, values)])
    return row
