"""What a replay found, as frozen data for the CLI (text or --json)."""

from __future__ import annotations

from typing import Literal

from pydantic import computed_field

from orchestrator.contract import Frozen
from orchestrator.replay.errors import Divergence
from orchestrator.replay.replay_model import TurnCheck
from orchestrator.replay.replay_tools import ToolDrift

Mode = Literal["replay", "reexecute", "fork"]


class DivergenceView(Frozen):
    turn: int
    kind: str
    field: str
    fields: tuple[str, ...]
    diff: str
    message: str

    @classmethod
    def of(cls, divergence: Divergence) -> "DivergenceView":
        return cls(turn=divergence.turn, kind=divergence.kind, field=divergence.field, fields=divergence.fields,
                   diff=divergence.diff, message=divergence.message)


class ReplayReport(Frozen):
    run_id: str
    mode: Mode
    replay_run_id: str | None
    identical: bool
    turns: tuple[TurnCheck, ...]
    divergence: DivergenceView | None = None
    request_mismatches: tuple[DivergenceView, ...] = ()
    noise_mismatches: tuple[DivergenceView, ...] = ()
    """Requests that differ only by a re-executed tool's volatile output."""
    drifts: tuple[ToolDrift, ...] = ()
    verdict: str | None = None
    verdict_detail: str | None = None
    recorded_verdict: str | None = None
    digest: str | None = None
    recorded_digest: str | None = None
    forked_at_turn: int | None = None
    notes: tuple[str, ...] = ()
    allow_drift: bool = False
    """A fork asked to continue from a prefix that drifted from its parent's."""
    recording_ends_at: int | None = None
    """The turn where a killed run's recording ends; the replay stopped there."""

    @property
    def first_drift_turn(self) -> int | None:
        """The first turn with real drift (noise left out)."""
        return min((d.turn for d in self.drifts if not d.noise), default=None)

    @computed_field  # type: ignore[prop-decorator]  # mypy cannot type a decorator over a property
    @property
    def noise_only(self) -> bool:
        """Everything that differs is volatile output (durations, timestamps, ...)."""
        return (not self.identical and self.divergence is None and not self.request_mismatches
                and all(d.noise for d in self.drifts))
