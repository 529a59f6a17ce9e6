"""``Replayer``: offline replay, re-execution and fork of a recorded run,
each recorded as a run of its own (mode "replay", "reexecute" or "fork",
linked to its parent) unless asked not to record.

The store (a ``RecordingStore``), the sandbox and the live model are handed in (``tools_for`` opens live tools
for a run id; ``live_model`` is a Model), so this module does no Docker, HTTP
or SQL itself.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from orchestrator.agent import RunResult
from orchestrator.canonical import sha256_hex
from orchestrator.context import TokenCounter
from orchestrator.contract import Frozen
from orchestrator.envelope import Envelope
from orchestrator.ports import Journal, Model, Tools
from orchestrator.replay.digest import trajectory_digest
from orchestrator.replay.divergence import compare
from orchestrator.replay.errors import ChainRefused, ReplayError
from orchestrator.replay.findings import DivergenceView, Mode, ReplayReport
from orchestrator.replay.ports import Liveness, RecordingStore, ReplayRecorder
from orchestrator.replay.recorded import ForkPoint, RecordedRun, from_trajectory
from orchestrator.replay.replay_journal import NullJournal
from orchestrator.replay.replay_tools import ToolDrift
from orchestrator.replay.session import Drive, ending_divergence, recording_died, replay_counter, tolerated_end

ToolsFor = Callable[[str], AbstractContextManager[Tools]]
DIVERGED = "DIVERGED"


class Loaded(Frozen):
    recorded: RecordedRun
    digest: str


class ForkOverrides(Frozen):
    """Settings a fork may change from its fork turn on."""

    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    max_tokens: int | None = None

    def apply(self, recorded: RecordedRun, at_turn: int) -> ForkPoint:
        spec = recorded.spec
        base = recorded.forks[-1] if recorded.forks else ForkPoint(
            at_turn=0, model=spec.model, sampling=spec.sampling.model_dump(mode="json"), k_max=spec.k_max)
        sampling = dict(base.sampling)
        for key in ("temperature", "top_p", "top_k", "seed"):
            if getattr(self, key) is not None:
                sampling[key] = getattr(self, key)
        return ForkPoint(at_turn=at_turn, model=self.model or base.model, sampling=sampling,
                         k_max=self.max_tokens or base.k_max)


def check_fork_turn(recorded: RecordedRun, at_turn: int) -> None:
    if not 0 <= at_turn < len(recorded.turns):
        raise ReplayError(f"--fork-at {at_turn}: run {recorded.run_id} has turns 0..{len(recorded.turns) - 1}",
                          turn=at_turn)


class Replayer:
    def __init__(self, store: RecordingStore, *, clock: Callable[[], float] = time.time,
                 liveness: Liveness | None = None, progress: Callable[[int, int], None] = lambda done, total: None,
                 ) -> None:
        self.store = store
        self.clock = clock
        self.liveness = liveness
        self.progress = progress  # (turns replayed, turns recorded), after each turn

    def load(self, ref: str, *, force: bool = False) -> Loaded:
        """The run ``ref`` names, as frozen records; refuses a run whose chain
        does not verify unless ``force``."""
        check = self.store.verify(ref)
        if not check.ok and not force:
            raise ChainRefused(f"run {check.run_id}'s hash chain does not verify ({check.problem}); "
                               "its rows may have been altered. Use --force to replay it anyway",
                               run_id=check.run_id, problem=check.problem)
        trajectory = self.store.trajectory(check.run_id)
        return Loaded(recorded=from_trajectory(trajectory), digest=trajectory_digest(trajectory))

    def offline(self, loaded: Loaded, *, record: bool = True) -> ReplayReport:
        """Recorded envelopes and tool results through today's loop; stops at
        the first divergence."""
        return self._replay(loaded, "replay", record=record)

    def reexecute(self, loaded: Loaded, tools_for: ToolsFor, *, record: bool = True) -> ReplayReport:
        """Recorded model outputs, tools run live; reports where results drift."""
        return self._replay(loaded, "reexecute", record=record, tools_for=tools_for, strict=False)

    def fork(self, loaded: Loaded, at_turn: int, *, tools_for: ToolsFor, live_model: Model,
             overrides: ForkOverrides = ForkOverrides(), live_counter: TokenCounter | None = None,
             live_cost: Callable[[Envelope], float] = lambda envelope: 0.0, allow_drift: bool = False) -> ReplayReport:
        """Replay turns before ``at_turn`` (tools live, so the workspace gets
        there), then continue live as a new run linked to its parent. A
        prefix that drifted from the parent's stops it unless ``allow_drift``."""
        check_fork_turn(loaded.recorded, at_turn)
        point = overrides.apply(loaded.recorded, at_turn)
        return self._replay(loaded, "fork", record=True, tools_for=tools_for, live_model=live_model,
                            fork=point, live_counter=live_counter, live_cost=live_cost, allow_drift=allow_drift)

    def _replay(
        self,
        loaded: Loaded,
        mode: Mode,
        *,
        record: bool,
        tools_for: ToolsFor | None = None,
        strict: bool = True,
        live_model: Model | None = None,
        fork: ForkPoint | None = None,
        live_counter: TokenCounter | None = None,
        live_cost: Callable[[Envelope], float] = lambda envelope: 0.0,
        allow_drift: bool = False,
    ) -> ReplayReport:
        recorded = loaded.recorded
        forks = recorded.forks + ((fork,) if fork else ())
        recorder = self.store.recorder(clock=self.clock) if record else None
        run_id = self._start(recorder, recorded, mode, forks) if recorder else uuid.uuid4().hex
        journal: Journal = recorder.journal(run_id) if recorder else NullJournal()
        total = len(recorded.turns)

        def on_turn(turn: int) -> None:
            self.progress(turn + 1, total)

        if tools_for is None:
            drive = Drive(recorded, journal, strict=strict, forks=forks, on_turn=on_turn)
            return self._finish(drive, loaded, mode, recorder, run_id)
        with tools_for(run_id) as live_tools:
            drive = Drive(recorded, journal, live_tools=live_tools, live_model=live_model, strict=strict,
                          live_from=fork.at_turn if fork else None, forks=forks, allow_drift=allow_drift,
                          counter=replay_counter(recorded, live_counter) if fork else None, live_cost=live_cost,
                          on_turn=on_turn)
            return self._finish(drive, loaded, mode, recorder, run_id)

    def _start(self, recorder: ReplayRecorder, recorded: RecordedRun, mode: Mode, forks: tuple[ForkPoint, ...]) -> str:
        # Not the batch its run was an attempt of: no attempt of it notes this one.
        config: dict[str, Any] = {**{k: v for k, v in recorded.config.items() if k != "batch"},
                                  "forks": [f.model_dump(mode="json") for f in forks]}
        config["replay_of"] = recorded.run_id
        run_id = recorder.start_run(
            task=recorded.task, repo=recorded.repo, config=config, policy=recorded.policy.model_dump(mode="json"),
            model=recorded.spec.model, mode=mode, parent_run_id=recorded.run_id,
            forked_at_turn=forks[-1].at_turn if mode == "fork" else None,
            lease=self.liveness.claim() if self.liveness else None,
        )
        if self.liveness is not None:
            self.liveness.started(run_id)
        return run_id

    def _finish(
        self, drive: Drive, loaded: Loaded, mode: Mode, recorder: ReplayRecorder | None, run_id: str
    ) -> ReplayReport:
        recorded = loaded.recorded
        notes: list[str] = []

        def before_verdict(result: RunResult) -> None:
            if mode == "replay":
                drive.divergence = ending_divergence(recorded, result)
            if recorder is not None:
                recorder.record_event(run_id, result.turns, "replay", _summary(drive, recorded))
                # Tools that ran live left a workspace: its patch is the run's result, recorded as a live run's is.
                record_patch = getattr(drive.live_tools, "record_patch", None)
                if record_patch is not None:
                    record_patch(recorder, run_id, result)

        drive.run(before_verdict)
        if mode == "reexecute":
            workspace = workspace_drift(recorded, drive)
            if workspace is not None:
                drive.tools.drifts.append(workspace)
        divergence = drive.divergence
        ends_at = None
        if divergence is not None and (note := tolerated_end(recorded, divergence)):
            notes.append(note)
            ends_at = divergence.turn if recording_died(recorded, divergence) else None
            divergence = None
        if drive.result is None and recorder is not None:
            recorder.record_event(run_id, None, "replay", _summary(drive, recorded))
            verdict = DIVERGED if divergence else "REPLAYED"
            recorder.finish_run(run_id, verdict, divergence.message if divergence else notes[0])
        digest = None
        if recorder is not None and mode == "replay" and divergence is None and drive.result is not None:
            digest = trajectory_digest(self.store.trajectory(run_id))
        mismatches = tuple(DivergenceView.of(d) for d in drive.model.mismatches)
        noise_mismatches = tuple(DivergenceView.of(d) for d in drive.model.noise_mismatches)
        identical = divergence is None and not mismatches and not noise_mismatches and not drive.tools.drifts and (
            digest is None or digest == loaded.digest)
        if mode == "fork":
            # The prefix matched the parent's: no divergence, no drifted tool.
            identical = divergence is None and not drive.tools.drifts
        result = drive.result
        return ReplayReport(
            run_id=recorded.run_id, mode=mode, replay_run_id=run_id if recorder else None, identical=identical,
            turns=tuple(drive.model.checks), divergence=DivergenceView.of(divergence) if divergence else None,
            request_mismatches=mismatches, noise_mismatches=noise_mismatches, drifts=tuple(drive.tools.drifts),
            verdict=result.verdict.value if result else (DIVERGED if divergence else None),
            verdict_detail=result.detail if result else None, recorded_verdict=recorded.verdict,
            digest=digest, recorded_digest=loaded.digest,
            forked_at_turn=drive.live_from, notes=tuple(notes), recording_ends_at=ends_at,
            allow_drift=drive.allow_drift,
        )


def workspace_drift(recorded: RecordedRun, drive: Drive) -> ToolDrift | None:
    """The workspace a re-execution left, against the recorded patch."""
    patch_text = getattr(drive.live_tools, "patch_text", None)
    if patch_text is None or recorded.patch_text is None:
        return None
    before, after = recorded.patch_text, patch_text()
    if before == after:
        return None
    _, diff = compare(before, after)
    return ToolDrift(turn=max(0, len(drive.model.checks) - 1), candidate_index=-1, tool="(workspace)",
                     recorded_exit_code=None, replayed_exit_code=None, recorded_output_sha256=sha256_hex(before),
                     replayed_output_sha256=sha256_hex(after), diff=diff, kind="workspace")


def _summary(drive: Drive, recorded: RecordedRun) -> dict[str, Any]:
    d = drive.divergence
    return {
        "replay_of": recorded.run_id,
        "turns_checked": len(drive.model.checks),
        "request_mismatches": [m.turn for m in drive.model.mismatches],
        "drifts": [x.turn for x in drive.tools.drifts if not x.noise],
        "noise": [x.turn for x in drive.tools.drifts if x.noise],
        "divergence": None if d is None else {"turn": d.turn, "kind": d.kind, "field": d.field},
    }
