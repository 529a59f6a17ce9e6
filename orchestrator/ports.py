"""The loop's view of the outside world. The loop imports none of httpx,
docker or sqlite; it talks to these Protocols, which live adapters (HTTP client,
Docker sandbox, SQLite recorder) and replay adapters (recorded envelopes and
tool results) both satisfy."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import BaseModel

from orchestrator.candidate import Transition
from orchestrator.contract import Captured, Frozen, Message, ModelRequest, ToolCall, ToolSpec
from orchestrator.envelope import Envelope
from orchestrator.evidence import Evidence
from orchestrator.suspect import SuspectReason


class DecisionLike(Protocol):
    """An ACL decision as the loop records it: its effect, the rule that
    decided, and why."""

    @property
    def effect(self) -> str: ...  # "allow" | "deny" | "ask"
    @property
    def rule(self) -> str: ...
    @property
    def reason(self) -> str: ...


class Model(Protocol):
    def call(self, request: ModelRequest, *, cancel: threading.Event | None = None) -> Envelope: ...


class ToolOutcome(Frozen):
    """What one executed (or refused) tool call produced: the one shape the
    loop, the store and the screen read, made once from the sandbox's
    result (``sandbox.loop_tools.outcome_of``) or a recorded row.
    ``observation`` is the exact text fed back to the model."""

    observation: str
    ok: bool
    exit_code: int | None = None
    duration_s: float = 0.0
    stdout: Captured | None = None
    stderr: Captured | None = None
    timed_out: bool | None = None  # None: no command ran (a refusal, a file tool's reply)
    canceled: bool = False
    verifier_passed: bool | None = None
    evidence: Evidence | None = None  # what a submit's verdict rests on
    patch_sha256: str | None = None  # the patch a submit verified
    patch_files: tuple[str, ...] | None = None
    suspect: tuple[SuspectReason, ...] = ()  # a passing submit's reasons for SUSPECT (orchestrator.suspect)
    resolved_path: str | None = None  # a file tool's path after symlinks, as the ACL judged it
    resolved_rule: str | None = None
    layer: str | None = None  # the perimeter layer that refused the call
    other: dict[str, Any] = {}  # what a recorded row holds beyond these (an imported run's facts)


class Tools(Protocol):
    def specs(self) -> tuple[ToolSpec, ...]: ...

    def arg_models(self) -> Mapping[str, type[BaseModel]]: ...

    def execute(self, name: str, args: BaseModel, *, time_left_s: float | None = None) -> ToolOutcome:
        """Run one committed call; a command may not run past ``time_left_s``,
        the run's remaining wall time."""
        ...


class Journal(Protocol):
    """Write-ahead recording of one run, turn by turn."""

    def request(self, turn: int, request: ModelRequest) -> Any: ...

    def envelope(self, turn: int, call_ref: Any, envelope: Envelope, cost_usd: float) -> None: ...

    def candidate(self, turn: int, call_ref: Any, index: int, call: ToolCall) -> Any: ...

    def transition(self, candidate_ref: Any, transition: Transition) -> None: ...

    def tool(
        self, candidate_ref: Any, name: str, args: BaseModel | None, decision: DecisionLike | None, outcome: ToolOutcome
    ) -> None: ...

    def event(self, turn: int | None, kind: str, data: dict[str, Any]) -> None:
        """``turn`` None: an event of the run as a whole (the verdict, the patch)."""
        ...

    def end_turn(self, turn: int, appended: tuple[Message, ...]) -> None: ...


class Context(Protocol):
    """Assembles each turn's request; history is append-only."""

    def append(self, message: Message, *, elidable: bool = False) -> None:
        """Add a message produced by this turn; ``elidable`` marks tool output
        that compaction may shorten."""
        ...

    def build(self, turn: int, *, turns_left: int) -> ModelRequest:
        """The request for this turn. Raises BudgetExhausted(limit="context")
        when even compaction cannot fit the window."""
        ...

    def observe(self, envelope: Envelope) -> None:
        """Learn from the server's reported usage (token-count calibration)."""
        ...

    def drain_events(self) -> list[dict[str, Any]]:
        """Compaction and calibration events since the last call, to record;
        each has a "kind"."""
        ...
