"""A content digest of a recorded trajectory: what a faithful replay must
reproduce, and nothing that legitimately differs between two recordings of
the same trajectory (row ids, timestamps, durations, the chain head built
over them).

Per turn: the request sha256, the envelope sha256, each candidate's tool call
and escrow transitions, each tool execution's arguments, ACL decision, ok,
exit code and observation sha256, and the messages the turn appended; then the
verdict. Turns are folded in order, so the digest of the first N turns of a
fork equals its parent's.
"""

from __future__ import annotations

import hashlib
from typing import Any

from orchestrator.canonical import canonical_json
from orchestrator.trajectory import Trajectory, TurnRecord


def turn_content(record: TurnRecord) -> list[Any]:
    calls = [c for c in record.calls if c.attempt_of is None]
    index_of = {c.id: c.candidate_index for c in record.candidates}
    return [
        [[c.request_sha256, c.response.envelope_sha256 if c.response else None] for c in calls],
        [[c.candidate_index, c.tool_call_json, [[t.from_state, t.to_state, t.layer, t.reason] for t in c.transitions]]
         for c in sorted(record.candidates, key=lambda c: c.candidate_index)],
        sorted([index_of.get(t.candidate_id, -1), t.tool_name, t.arguments_json, t.decision, t.rule, t.ok, t.exit_code,
                t.observation_sha256] for t in record.tool_executions),
        record.committed.messages_json if record.committed else None,
    ]


def trajectory_digest(trajectory: Trajectory, *, turns: int | None = None) -> str:
    """sha256 over the content of the turns (the first ``turns`` of them when
    given, without the verdict; all of them and the verdict otherwise)."""
    digest = hashlib.sha256()
    for record in trajectory.turns:
        if not record.calls or (turns is not None and record.turn >= turns):
            continue
        digest.update(canonical_json([record.turn, turn_content(record)]).encode("utf-8"))
    if turns is None:
        run = trajectory.run
        digest.update(canonical_json(["verdict", run.verdict, run.verdict_detail]).encode("utf-8"))
    return digest.hexdigest()
