"""``RunJournal``: the store-backed implementation of the loop's Journal port
(orchestrator.ports.Journal) for one run.

The request is committed before the call; the turn's other rows are buffered
and committed with the turn row at ``end_turn``. Events outside an open turn
are committed at once; the loop's ``verdict`` event closes the run.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from orchestrator.candidate import Transition
from orchestrator.contract import Message, ModelRequest, ToolCall
from orchestrator.envelope import Envelope
from orchestrator.ports import DecisionLike, ToolOutcome
from store.chain import VERDICT_EVENT
from store.errors import RecordingError
from store.write.recorder import Recorder, TurnWriter


class RunJournal:
    def __init__(self, recorder: Recorder, run_id: str) -> None:
        self.recorder = recorder
        self.run_id = run_id
        self.open: TurnWriter | None = None

    def _turn(self, turn: int) -> TurnWriter:
        if self.open is None or self.open.turn != turn:
            raise RecordingError(f"run {self.run_id}: turn {turn} has no recorded request", run_id=self.run_id)
        return self.open

    def request(self, turn: int, request: ModelRequest) -> str:
        if self.open is None or self.open.turn != turn or self.open.closed:
            self.open = self.recorder.turn(self.run_id, turn)
        return self.open.request(request)

    def envelope(self, turn: int, call_ref: Any, envelope: Envelope, cost_usd: float) -> None:
        self._turn(turn).envelope(str(call_ref), envelope, cost_usd)

    def candidate(self, turn: int, call_ref: Any, index: int, call: ToolCall) -> str:
        return self._turn(turn).candidate(str(call_ref), index, call)

    def transition(self, candidate_ref: Any, transition: Transition) -> None:
        if self.open is None:
            raise RecordingError(f"run {self.run_id}: a transition outside any turn", run_id=self.run_id)
        self.open.transition(
            str(candidate_ref), transition.from_state, transition.to_state, transition.reason, transition.layer
        )

    def tool(
        self, candidate_ref: Any, name: str, args: BaseModel | None, decision: DecisionLike | None, outcome: ToolOutcome
    ) -> None:
        if self.open is None:
            raise RecordingError(f"run {self.run_id}: a tool execution outside any turn", run_id=self.run_id)
        detail = recorded_detail(outcome)
        self.open.tool_execution(
            str(candidate_ref), tool=name, arguments_json=args, decision=decision.effect if decision else None,
            rule=decision.rule if decision else None, reason=decision.reason if decision else None,
            exit_code=outcome.exit_code, duration_s=outcome.duration_s, observation=outcome.observation,
            ok=outcome.ok, detail=detail or None, stdout=outcome.stdout, stderr=outcome.stderr,
        )

    def event(self, turn: int | None, kind: str, data: dict[str, Any]) -> None:
        if kind == VERDICT_EVENT:
            extra = {k: v for k, v in data.items() if k not in ("verdict", "detail")}
            self.recorder.finish_run(self.run_id, str(data.get("verdict")), str(data.get("detail", "")), turn=turn,
                                     extra=extra)
        elif self.open is not None and self.open.turn == turn and not self.open.closed:
            self.open.event(kind, data)
        else:
            self.recorder.record_event(self.run_id, turn, kind, data)

    def end_turn(self, turn: int, appended: tuple[Message, ...]) -> None:
        self._turn(turn).commit(appended)


def recorded_detail(outcome: ToolOutcome) -> dict[str, Any]:
    """A tool execution's ``detail_json``: the outcome's facts beyond its
    columns (the streams have their own), each only where it has one;
    ``orchestrator.replay.recorded`` reads them back."""
    detail = dict(outcome.other)
    if outcome.timed_out is not None:
        detail["timed_out"] = outcome.timed_out
    if outcome.canceled:
        detail["canceled"] = True
    if outcome.layer is not None:
        detail["layer"] = outcome.layer
    if outcome.resolved_path is not None:
        detail["resolved_path"] = outcome.resolved_path
        detail["resolved_rule"] = outcome.resolved_rule
    if outcome.evidence is not None:
        detail["evidence"] = outcome.evidence.model_dump(mode="json")
    if outcome.patch_sha256 is not None:
        detail["patch_sha256"] = outcome.patch_sha256
    if outcome.patch_files is not None:
        detail["patch_files"] = list(outcome.patch_files)
    if outcome.verifier_passed is not None:
        detail["verifier_passed"] = outcome.verifier_passed
    if outcome.suspect:
        detail["suspect"] = [r.model_dump() for r in outcome.suspect]
    return detail


class JournaledRecorder(Recorder):
    """A Recorder that also hands out the loop's Journal port: what
    ``Store.recorder`` gives the replayer. It lives here, not on Recorder,
    so that the recorder need not import the journal that imports it."""

    def journal(self, run_id: str) -> RunJournal:
        """The loop's Journal port, recording into ``run_id``."""
        return RunJournal(self, run_id)
