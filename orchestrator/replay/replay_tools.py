"""``ReplayTools``: the Tools port over a recording.

The perimeter runs as it does live: the same argument models and the loop's
ACL under the recorded policy; ``checked`` wraps that one ACL so each decision
is compared with the recorded call and decision. ``execute``
serves the recorded outcome (offline) or runs the tool in a live sandbox and
reports where its result drifted from the recording (re-execution).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from orchestrator.canonical import sha256_hex
from orchestrator.contract import Frozen, ToolSpec
from orchestrator.perimeter import Decide
from orchestrator.ports import DecisionLike, ToolOutcome, Tools
from orchestrator.replay.divergence import compare
from orchestrator.replay.errors import Divergence, recording_ends
from orchestrator.replay.noise import DriftKind, classify
from orchestrator.replay.recorded import RecordedTool, RecordedTurn
from orchestrator.replay.replay_model import Cursor
from orchestrator.toolset import TOOLS, tool_specs
from policies import Policy


class ToolDrift(Frozen):
    """A re-executed tool whose result differs from the recorded one."""

    turn: int
    candidate_index: int
    tool: str
    recorded_exit_code: int | None
    replayed_exit_code: int | None
    recorded_output_sha256: str
    replayed_output_sha256: str
    diff: str
    kind: DriftKind = "output"
    """exit_code, output or workspace: real drift; noise: only volatile fields differ."""

    @property
    def noise(self) -> bool:
        return self.kind == "noise"


def recorded_tool(turns: Mapping[int, RecordedTurn], cursor: Cursor) -> RecordedTool | None:
    turn = turns.get(cursor.turn)
    if turn is None:
        return None
    return next((t for t in turn.tools if t.candidate_index == cursor.candidate), None)


def in_flight(turns: Mapping[int, RecordedTurn], turn: int, recorded: RecordedTool | None) -> None:
    """A candidate of the turn the run died in has no recorded result: the
    recording ends here (no divergence)."""
    record = turns.get(turn)
    if recorded is None and record is not None and not record.committed:
        raise recording_ends(turn, "the run died before this turn's tool calls were committed")


def check_call(
    turn: int, index: int, recorded: RecordedTool | None, name: str, args: BaseModel | None
) -> RecordedTool:
    """The tool call reaching the sandbox must be the recorded one."""
    field = f"tool_calls[{index}]"
    if recorded is None:
        raise Divergence(
            turn=turn, kind="tool_call", field=field, diff=f"the recording has no candidate {index} in this turn\n"
        )
    if recorded.name != name:
        raise Divergence(turn=turn, kind="tool_call", field=f"{field}.name", recorded=recorded.name, replayed=name,
                         diff=f"- {recorded.name}\n+ {name}\n")
    replayed = None if args is None else args.model_dump(mode="json")
    paths, diff = compare(recorded.arguments, replayed)
    if paths:
        raise Divergence(turn=turn, kind="tool_call", field=f"{field}.arguments.{paths[0]}".rstrip(".$"),
                         fields=paths, diff=diff)
    return recorded


class ReplayTools:
    """``live``: the sandbox tools to re-execute with; None serves the recording."""

    def __init__(self, turns: Mapping[int, RecordedTurn], cursor: Cursor, policy: Policy, *,
                 live: Tools | None = None) -> None:
        self.turns = turns
        self.cursor = cursor
        self.policy = policy
        self.live = live
        self.drifts: list[ToolDrift] = []

    def specs(self) -> tuple[ToolSpec, ...]:
        return tool_specs(self.policy.tools.allowed)

    def arg_models(self) -> Mapping[str, type[BaseModel]]:
        return TOOLS

    def checked(self, acl: Decide) -> Decide:
        """The loop's ACL, each decision checked against the recording."""

        def decide_call(name: str, args: BaseModel) -> DecisionLike:
            return self._check_decision(name, args, acl(name, args))

        return decide_call

    def _check_decision(self, name: str, args: BaseModel, decision: DecisionLike) -> DecisionLike:
        recorded = recorded_tool(self.turns, self.cursor)
        in_flight(self.turns, self.cursor.turn, recorded)
        if recorded is None and self.cursor.turn not in self.turns:
            return decision  # a live (forked) turn
        turn, index = self.cursor.turn, self.cursor.candidate
        recorded = check_call(turn, index, recorded, name, args)
        if (recorded.decision, recorded.rule) != (decision.effect, decision.rule):
            raise Divergence(
                turn=turn,
                kind="acl",
                field=f"tool_calls[{index}].decision",
                recorded=f"{recorded.decision} ({recorded.rule})",
                replayed=f"{decision.effect} ({decision.rule})",
                diff=(
                    f"- {recorded.decision} by rule {recorded.rule}\n+ {decision.effect} by rule {decision.rule}: "
                    f"{decision.reason}\n"
                ),
            )
        return decision

    def execute(self, name: str, args: BaseModel, *, time_left_s: float | None = None) -> ToolOutcome:
        recorded = recorded_tool(self.turns, self.cursor)
        if self.live is None:
            in_flight(self.turns, self.cursor.turn, recorded)
            check_call(self.cursor.turn, self.cursor.candidate, recorded, name, args)
            assert recorded is not None
            return recorded.outcome
        outcome = self.live.execute(name, args, time_left_s=time_left_s)
        if recorded is not None:
            self._note_drift(recorded, outcome)
        return outcome

    def _note_drift(self, recorded: RecordedTool, outcome: ToolOutcome) -> None:
        before, after = recorded.outcome, outcome
        kind = classify(before.exit_code, after.exit_code, before.observation, after.observation,
                        self.policy.replay.volatile)
        if kind is None:
            return
        _, diff = compare(before.observation, after.observation)
        self.drifts.append(ToolDrift(
            kind=kind,
            turn=self.cursor.turn, candidate_index=self.cursor.candidate, tool=recorded.name,
            recorded_exit_code=before.exit_code, replayed_exit_code=after.exit_code,
            recorded_output_sha256=sha256_hex(before.observation), replayed_output_sha256=sha256_hex(after.observation),
            diff=diff or f"- exit {before.exit_code}\n+ exit {after.exit_code}\n",
        ))
