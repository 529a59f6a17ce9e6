"""Teacher scores (schema 13, the top K from 14; ``escrow score``): what a run's answered calls
carry to be scored, the rows already written, and the row a scored call
appends to its run's chain (written by ``Recorder.commit_runs``, which refuses
a score naming a call its run did not make in that turn; ``escrow score``
commits each as soon as the teacher answered, so a killed scoring loses at
most the calls in flight)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, select

from orchestrator.canonical import canonical_json
from orchestrator.contract import Frozen
from orchestrator.envelope import Envelope
from store.schema.tables import ModelResponse, TeacherScoreRow, table_of
from store.write.recorder import RunRows
from store.write.rows import Pending
from store.write.token_ids import envelopes_in_order

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
    with ``logprobs``, ``in_top_k`` and ``top`` (None: no top K by id) parsed."""
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
        row["top"] = None if row["top_json"] is None else json.loads(row["top_json"])
        out.append(row)
    return out


class CallScore(Frozen):
    """A teacher's score of one answered call, to be recorded in its run's chain;
    ``at`` defaults to the moment it is committed."""

    run_id: str
    call_id: str
    turn: int | None
    teacher_model: str
    teacher_engine: str
    top_k: int
    request_sha256: str
    logprobs: tuple[float, ...]
    in_top_k: tuple[bool | None, ...]
    top: tuple[tuple[tuple[int, float], ...], ...] | None = None
    """Per sampled id, the teacher's top K as (id, logprob), best first; None where the engine gave none by id."""
    duration_s: float | None = None
    at: float | None = None


def _json_logprob(value: float) -> float | None:
    return None if value == float("-inf") else value


def score_row(score: CallScore, now: float) -> Pending:
    """The chained row of one call's score."""
    return (SCORES, {
        "id": f"{score.call_id}:{score.request_sha256[:16]}", "call_id": score.call_id, "turn": score.turn,
        "teacher_model": score.teacher_model, "teacher_engine": score.teacher_engine, "top_k": score.top_k,
        "request_sha256": score.request_sha256, "n_tokens": len(score.logprobs),
        # -inf (a token the teacher gives no chance) is not JSON: written as null.
        "logprobs_json": canonical_json([_json_logprob(v) for v in score.logprobs]),
        "in_top_k_json": canonical_json(list(score.in_top_k)), "duration_s": score.duration_s,
        "top_json": None if score.top is None else canonical_json(
            [[[token, _json_logprob(logprob)] for token, logprob in best] for best in score.top]),
        "at": now if score.at is None else score.at,
    })


def by_run(scores: Sequence[CallScore], now: float) -> list[RunRows]:
    """The scores' rows, one commit part per run, in the order given."""
    rows: dict[str, list[Pending]] = {}
    for score in scores:
        rows.setdefault(score.run_id, []).append(score_row(score, now))
    return [RunRows(run_id, found) for run_id, found in rows.items()]
