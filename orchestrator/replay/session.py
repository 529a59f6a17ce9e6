"""One replay drive: today's loop, built from the recorded spec exactly as a
live run builds it (``build_agent``), over a ReplayModel, ReplayTools and a
ReplayJournal. Pure of I/O: the journal, live tools, live model and token
counter arrive from outside.

Two things differ from the live run on purpose: the wall-time limit is lifted
(time is not part of a trajectory) and costs are the recorded ones (so cost
limits replay even if the price table changed). Everything else, turn, token
and cost limits included, replays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.agent import Agent, RunResult
from orchestrator.context import ReplayCounter, TokenCounter, resolve_counter
from orchestrator.contract import Sampling
from orchestrator.envelope import Envelope
from orchestrator.limits import Tally
from orchestrator.perimeter import acl_of
from orchestrator.ports import Journal, Model, Tools
from orchestrator.replay.errors import ENDED, Divergence, recording_ends
from orchestrator.replay.noise import request_noise
from orchestrator.replay.recorded import ForkPoint, RecordedRun
from orchestrator.replay.replay_journal import ReplayJournal
from orchestrator.replay.replay_model import Cursor, ReplayModel
from orchestrator.replay.replay_tools import ReplayTools, ToolDrift
from orchestrator.runspec import RunSpec, build_agent
from orchestrator.turn_context import TurnContext

NO_WALL_LIMIT_S = 1e12


class FallbackCounter:
    """Recorded counts first, then a live counter: a fork's live turns count
    new text with the same server tokenizer its prefix was counted with."""

    def __init__(self, recorded: ReplayCounter, live: TokenCounter) -> None:
        self.recorded = recorded
        self.live = live

    @property
    def name(self) -> str:
        return self.recorded.name

    def count(self, text: str) -> int:
        try:
            return self.recorded.count(text)
        except Exception:  # noqa: BLE001 - a text the recording never counted
            return self.live.count(text)


def replay_counter(recorded: RecordedRun, live: TokenCounter | None = None) -> TokenCounter:
    name = recorded.spec.tokenizer
    if name.startswith("tiktoken:") or name == "cl100k_base":
        return resolve_counter(name)
    served = ReplayCounter(name, recorded.token_counts)
    return served if live is None else FallbackCounter(served, live)


def replay_spec(spec: RunSpec) -> RunSpec:
    limits = spec.limits.model_copy(update={"max_wall_s": NO_WALL_LIMIT_S})
    return spec.model_copy(update={"limits": limits})


def reshape(agent: Agent, point: ForkPoint) -> None:
    """Switch the request shape the way a fork did at ``point.at_turn``."""
    context = agent.context
    assert isinstance(context, TurnContext), "forks need build_agent's TurnContext"
    context.reshape(model=point.model, max_tokens=point.k_max, sampling=Sampling.model_validate(point.sampling))


@dataclass
class Drive:
    """The parts of one replay and, after ``run``, what happened."""

    recorded: RecordedRun
    journal: Journal
    live_tools: Tools | None = None
    live_model: Model | None = None
    live_from: int | None = None
    strict: bool = True
    allow_drift: bool = False
    counter: TokenCounter | None = None
    forks: tuple[ForkPoint, ...] = ()
    live_cost: Callable[[Envelope], float] = lambda envelope: 0.0
    on_turn: Callable[[int], None] = lambda turn: None  # a turn replayed (progress)
    cursor: Cursor = field(default_factory=Cursor)
    result: RunResult | None = None
    divergence: Divergence | None = None

    def __post_init__(self) -> None:
        turns = {t.turn: t for t in self.recorded.turns if self.live_from is None or t.turn < self.live_from}
        volatile = self.recorded.policy.replay.volatile
        self.model = ReplayModel(turns, self.cursor, strict=self.strict, live=self.live_model, live_from=self.live_from,
                                 noise=lambda a, b: request_noise(a, b, volatile), on_live=self._check_prefix)
        self.tools = ReplayTools(turns, self.cursor, self.recorded.policy, live=self.live_tools)
        self.replay_journal = ReplayJournal(self.journal, turns, self.cursor)
        self.agent = build_agent(
            replay_spec(self.recorded.spec), counter=self.counter or replay_counter(self.recorded),
            model=self.model, tools=self.tools, acl=self.tools.checked(acl_of(self.recorded.policy)),
            journal=self.replay_journal, cost_of=self._cost,
            on_turn=self._after_turn,
        )
        self._switch(0)

    def _cost(self, envelope: Envelope) -> float:
        return self.live_cost(envelope) if self.model.is_live(self.cursor.turn) else self.model.recorded_cost(envelope)

    def _check_prefix(self, turn: int) -> None:
        """A fork goes live only from a prefix identical to its parent's: a
        re-executed tool that drifted before ``turn`` (noise included: the
        live request would carry it) stops it, unless drift is allowed."""
        drifted = [d for d in self.tools.drifts if d.turn < turn]
        if drifted and not self.allow_drift and turn == self.live_from:
            raise prefix_divergence(turn, drifted)

    def _switch(self, turn: int) -> None:
        for point in self.forks:
            if point.at_turn == turn:
                reshape(self.agent, point)

    def _after_turn(self, turn: int, envelope: Envelope, tally: Tally) -> None:  # noqa: ARG002
        self.on_turn(turn)
        self._switch(turn + 1)

    def run(self, before_verdict: Callable[[RunResult], None] | None = None) -> None:
        try:
            self.result = self.agent.run(before_verdict=before_verdict)
        except Divergence as divergence:
            self.divergence = divergence


def prefix_divergence(fork_at: int, drifted: list[ToolDrift]) -> Divergence:
    first = drifted[0]
    what = "; ".join(f"turn {d.turn} {d.tool}: {d.kind}{' (volatile fields only)' if d.noise else ''}" for d in drifted)
    return Divergence(
        turn=first.turn, kind="prefix", field=f"tool_calls[{first.candidate_index}].observation",
        diff=(f"the fork's prefix (turns before {fork_at}) differs from the parent's: {what}\n"
              f"{first.diff}(--allow-drift forks from it anyway)\n"),
    )


def ending_divergence(recorded: RecordedRun, result: RunResult) -> Divergence | None:
    """A replay must end where and how the recording ended."""
    want = (len(recorded.turns), recorded.verdict, recorded.verdict_detail)
    got = (result.turns, result.verdict.value, result.detail)
    if not recorded.finished:
        # Killed inside its finishing transaction, a run has every turn and no
        # verdict: the replay reaching one has run past where the recording ends.
        return recording_ends(result.turns, f"the replay reached {got[1]}, the recording has no verdict")
    if want == got:
        return None
    return Divergence(
        turn=result.turns, kind="ending", field="verdict", recorded=want, replayed=got,
        diff=f"- {want[1]} after {want[0]} turns: {want[2]}\n+ {got[1]} after {got[0]} turns: {got[2]}\n",
    )


def recording_died(recorded: RecordedRun, divergence: Divergence) -> bool:
    """The loop ran past the end of a recording whose run died (no verdict)."""
    return divergence.kind == ENDED or (divergence.kind == "exhausted" and not recorded.finished)


def tolerated_end(recorded: RecordedRun, divergence: Divergence) -> str | None:
    """Why running past the recording is no divergence, if it is not: the
    recorded run died there, or hit the wall-time limit replay ignores."""
    if recording_died(recorded, divergence):
        return (f"the recording ends at turn {divergence.turn} (the run died); "
                "everything recorded before that point was replayed")
    if divergence.kind != "exhausted":
        return None
    if divergence.turn == len(recorded.turns) and (recorded.verdict_detail or "").startswith("wall_time"):
        return "the recorded run hit its wall-time limit here; replay ignores wall time"
    return None
