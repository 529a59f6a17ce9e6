"""What replay needs from a store, as Protocols: the store adapter satisfies
them structurally, so replay logic never imports the store (docs/ARCHITECTURE.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from orchestrator.ports import Journal
from orchestrator.trajectory import Trajectory


class ChainStatus(Protocol):
    """The outcome of checking one recorded run's hash chain."""

    @property
    def run_id(self) -> str: ...
    @property
    def ok(self) -> bool: ...
    @property
    def problem(self) -> str | None: ...


class Liveness(Protocol):
    """The lease a recorded replay holds while its process lives, so that a
    killed replay, re-execution or fork reads ``crashed`` like any run."""

    def claim(self) -> Any:
        """What ``start_run`` takes with the run's first row."""

    def started(self, run_id: str) -> None:
        """Begin renewing the run's lease."""


class ReplayRecorder(Protocol):
    """Records a replay as a run of its own."""

    def start_run(
        self, *, task: str, repo: str, config: Mapping[str, Any], policy: Mapping[str, Any], model: str,
        mode: str = "run", parent_run_id: str | None = None, forked_at_turn: int | None = None,
        lease: Any = None,
    ) -> str: ...

    def record_event(self, run_id: str, turn: int | None, kind: str, data: Mapping[str, Any]) -> str: ...

    def finish_run(self, run_id: str, verdict: str, detail: str = "") -> None: ...

    def journal(self, run_id: str) -> Journal: ...


class RecordingStore(Protocol):
    """Where recorded runs are read from and replays recorded to."""

    def verify(self, ref: str) -> ChainStatus: ...

    def trajectory(self, ref: str) -> Trajectory: ...

    def recorder(self, *, clock: Callable[[], float]) -> ReplayRecorder: ...
