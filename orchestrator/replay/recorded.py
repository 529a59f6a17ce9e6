"""A recorded run, loaded once into frozen per-turn records: what a replay
serves (envelopes, tool outcomes, token counts) and checks against (request
hashes, tool calls, ACL decisions, the ending).

Pure over the store's read views: ``from_trajectory`` does no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from orchestrator.canonical import recorded_bytes, shown_text
from orchestrator.contract import Captured, Frozen
from orchestrator.ports import ToolOutcome
from orchestrator.replay.errors import RecordingUnusable
from orchestrator.runspec import RunSpec
from orchestrator.trajectory import ToolExecutionView, Trajectory
from policies import Policy

COMMITTED = "COMMITTED"


class RecordedTool(Frozen):
    """One candidate's recorded perimeter result and, when it ran, its outcome."""

    candidate_index: int
    name: str
    arguments: Any
    decision: str | None
    rule: str | None
    committed: bool
    outcome: ToolOutcome


class RecordedTurn(Frozen):
    turn: int
    request_json: str
    request_sha256: str
    envelope_json: str | None
    cost_usd: float = 0.0
    tools: tuple[RecordedTool, ...] = ()
    staged: tuple[str, ...] = ()
    """Each staged candidate's tool call (canonical JSON), by candidate index."""
    committed: bool = True
    """False for the turn in flight when the run died: its request (and maybe
    its envelope) are recorded, its candidates and tool results are not."""

    @property
    def executed(self) -> tuple[RecordedTool, ...]:
        return tuple(t for t in self.tools if t.committed)

    @property
    def decided(self) -> tuple[RecordedTool, ...]:
        return tuple(t for t in self.tools if t.decision is not None)


class ForkPoint(Frozen):
    """How a forked run changed its requests from ``at_turn`` on (recorded in
    the fork's config so that replaying the fork switches at the same turn)."""

    at_turn: int
    model: str
    sampling: dict[str, Any]
    k_max: int


class RecordedRun(Frozen):
    run_id: str
    mode: str
    task: str
    repo: str
    escrow_version: str
    spec: RunSpec
    policy: Policy
    config: dict[str, Any]
    turns: tuple[RecordedTurn, ...]
    token_counts: dict[str, int]
    verdict: str | None
    verdict_detail: str | None
    finished: bool
    forks: tuple[ForkPoint, ...] = ()
    patch_text: str | None = None
    """The workspace change the run recorded (its ``patch`` event), if any."""


def _outcome(row: ToolExecutionView) -> ToolOutcome:
    """The typed outcome a recorded row holds (store.write.journal's ``recorded_detail``
    wrote its detail); a stream is its stored text, already rendered."""
    detail: dict[str, Any] = json.loads(row.detail_json) if row.detail_json else {}
    typed = {key: detail.pop(key) for key in _TYPED if key in detail}
    streams = {
        stream: Captured(head=getattr(row, stream), total_bytes=getattr(row, f"{stream}_bytes"),
                         sha256=getattr(row, f"{stream}_sha256"))
        for stream in ("stdout", "stderr") if getattr(row, stream) or getattr(row, f"{stream}_bytes")
    }
    return ToolOutcome.model_validate({
        "observation": row.observation, "ok": bool(row.ok), "exit_code": row.exit_code,
        "duration_s": row.duration_s or 0.0, **typed, **streams, "other": detail,
    })


# The detail keys ToolOutcome types; any other stays in ``other``.
_TYPED = ("timed_out", "canceled", "layer", "resolved_path", "resolved_rule", "evidence", "patch_sha256",
          "patch_files", "verifier_passed", "suspect")


def _turn(record: Any) -> RecordedTurn:
    call = next(c for c in record.calls if c.attempt_of is None)
    states = {c.id: (c.candidate_index, c.state) for c in record.candidates}
    tools: list[RecordedTool] = []
    for row in record.tool_executions:
        index, state = states.get(row.candidate_id, (len(tools), None))
        tools.append(RecordedTool(
            candidate_index=index, name=row.tool_name,
            arguments=None if row.arguments_json is None else json.loads(row.arguments_json),
            decision=row.decision, rule=row.rule, committed=state == COMMITTED, outcome=_outcome(row),
        ))
    tools.sort(key=lambda t: t.candidate_index)
    return RecordedTurn(
        turn=record.turn, request_json=call.request_json, request_sha256=call.request_sha256,
        envelope_json=call.response.envelope_json if call.response else None,
        cost_usd=(call.response.cost_usd or 0.0) if call.response else 0.0, tools=tuple(tools),
        staged=tuple(c.tool_call_json for c in sorted(record.candidates, key=lambda c: c.candidate_index)),
        committed=record.committed is not None,
    )


def from_trajectory(trajectory: Trajectory) -> RecordedRun:
    """Frozen records of one run; RecordingUnusable when it cannot be replayed."""
    run = trajectory.run
    config = run.config
    where = f"run {run.id} (recorded by escrow {run.escrow_version})"
    if "spec" not in config:
        raise RecordingUnusable(f"{where} has no run spec in its config; only runs recorded by `escrow run` "
                                "or a replay can be replayed", run_id=run.id)
    try:
        spec = RunSpec.model_validate(config["spec"])
        policy = Policy.model_validate(run.policy)
        forks = tuple(ForkPoint.model_validate(f) for f in config.get("forks", ()))
    except ValidationError as exc:
        first = exc.errors()[0]
        problem = f"{'.'.join(map(str, first['loc']))}: {first['msg']}"
        raise RecordingUnusable(f"{where} has a spec or policy this escrow cannot read ({problem})",
                                run_id=run.id) from exc
    counts: dict[str, int] = {}
    for record in trajectory.turns:
        for event in record.events:
            if event.kind == "token_counts":
                counts.update(event.data.get("counts", {}))
    turns = tuple(_turn(r) for r in trajectory.turns if any(c.attempt_of is None for c in r.calls))
    return RecordedRun(
        run_id=run.id, mode=run.mode, task=run.task, repo=run.repo, escrow_version=run.escrow_version, spec=spec,
        policy=policy, config=config, turns=turns, token_counts=counts, verdict=run.verdict,
        verdict_detail=run.verdict_detail, finished=run.status == "finished", forks=forks,
        patch_text=next((shown_text(recorded_bytes(e.data)) for e in trajectory.run_events if e.kind == "patch"),
                        None),
    )
