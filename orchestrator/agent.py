"""The turn loop: ``step()`` = act on ``query()``.

query: context -> ModelRequest -> (write-ahead) -> model -> Envelope -> record.
act:   route on status; a COMPLETED payload leaves escrow, each tool call is
       staged and passes the verification perimeter before the sandbox runs it.

The loop imports no I/O library: model, tools, journal and context arrive as
the Protocols in ``orchestrator.ports``. Limits and endings are exceptions
(``BudgetExhausted``, ``RunEnded``); the verdict is decided in one place.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from enum import Enum
from typing import Any

from orchestrator.candidate import Candidate, CandidateState, stage
from orchestrator.contract import Frozen, Message, ToolCall
from orchestrator.envelope import Envelope
from orchestrator.errors import BudgetExhausted, LoopAbort
from orchestrator.escrow import release_from_escrow
from orchestrator.grammar import NOT_HONOURED
from orchestrator.limits import Tally
from orchestrator.observations import no_tool_call, perimeter_rejection, stream_rejection, truncation_notice
from orchestrator.perimeter import Approve, Decide, check_candidate, deny_all_asks
from orchestrator.ports import Context, Journal, Model, ToolOutcome, Tools
from orchestrator.suspect import SuspectReason, summary
from orchestrator.tool_protocols import NativeProtocol, ToolProtocol
from policies.model import RunLimits
from policies.routing import Action, route


class Verdict(str, Enum):
    PASS = "PASS"
    # The verifier passed, but the patch touches the machinery of verification
    # (orchestrator.suspect): not a pass, never applied without --accept-suspect.
    SUSPECT = "SUSPECT"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    REFUSED = "REFUSED"
    TRANSPORT_FAILURE = "TRANSPORT_FAILURE"
    FAULTED = "FAULTED"
    CANCELED = "CANCELED"
    # Our side failed (the sandbox, the workspace export, the container died):
    # not the model's doing, and never left as a run without a verdict.
    INFRA_ERROR = "INFRA_ERROR"


VERIFIED = frozenset({Verdict.PASS, Verdict.SUSPECT})  # the verifier passed the patch


class RunResult(Frozen):
    verdict: Verdict
    detail: str
    turns: int
    tokens: int
    cost_usd: float
    verifier_runs: int = 0
    patch_sha256: str | None = None  # of the patch that passed (PASS and SUSPECT)
    suspect: tuple[SuspectReason, ...] = ()  # why it is SUSPECT (SUSPECT only)


class RunEnded(Exception):
    """Raised inside a step when the trajectory is over."""

    def __init__(self, verdict: Verdict, detail: str) -> None:
        super().__init__(detail)
        self.verdict = verdict
        self.detail = detail


_ENDINGS = {
    Action.END: Verdict.REFUSED,
    Action.STOP_TRANSPORT: Verdict.TRANSPORT_FAILURE,
    Action.STOP_FAULT: Verdict.FAULTED,
    Action.EVICT: Verdict.CANCELED,
}

SUBMIT_TOOL = "submit"
AFTER_SUBMIT = "refused: a tool call after submit in the same answer never runs (the submitted patch is final)"
LIMIT_LAYER = "limit"  # the rejection layer of calls the run's limits refused



class Agent:
    def __init__(
        self,
        *,
        model: Model,
        tools: Tools,
        acl: Decide,
        context: Context,
        journal: Journal,
        limits: RunLimits,
        protocol: ToolProtocol | None = None,
        cost_of: Callable[[Envelope], float] = lambda envelope: 0.0,
        approve: Approve = deny_all_asks,
        cancel: threading.Event | None = None,
        on_turn: Callable[[int, Envelope, Tally], None] | None = None,
    ) -> None:
        self.model = model
        self.tools = tools
        self.acl = acl
        self.context = context
        self.journal = journal
        self.protocol = protocol or NativeProtocol()
        self.tally = Tally(limits)
        self.cost_of = cost_of
        self.approve = approve
        self.cancel = cancel or threading.Event()
        self.on_turn = on_turn
        self.verifier_runs = 0
        self._constrained: str | None = None  # the kind of the last request's constraint
        self.passed_patch: str | None = None
        self.suspect: tuple[SuspectReason, ...] = ()

    def run(self, before_verdict: Callable[[RunResult], None] | None = None) -> RunResult:
        """Step until the trajectory ends; ``before_verdict`` may record more
        (e.g. the patch) before the verdict closes the run. Any other exception
        - a sandbox exec, the container, the export - ends the run INFRA_ERROR
        with the error recorded: every run ends with a verdict."""
        try:
            while True:
                self.step()
        except RunEnded as end:
            verdict, detail = end.verdict, end.detail
        except BudgetExhausted as exc:
            verdict, detail = Verdict.BUDGET_EXHAUSTED, f"{exc.limit}: {exc.message}"
        except KeyboardInterrupt:
            verdict, detail = Verdict.CANCELED, "interrupted by the user"
        except LoopAbort:
            raise
        except Exception as exc:  # noqa: BLE001 - recorded as the run's verdict, never swallowed silently
            verdict, detail = self._infra_error(exc, "during the run")
        result = self._result(verdict, detail)
        if before_verdict is not None:
            try:
                before_verdict(result)
            except LoopAbort:
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. the workspace export failed
                failed = self._infra_error(exc, f"at the end of the run (verdict was {verdict.value})")
                if verdict is not Verdict.INFRA_ERROR:  # else the first error stays the run's detail
                    verdict, detail = failed
                    result = self._result(verdict, detail)
        data: dict[str, object] = {"verdict": verdict.value, "detail": detail}
        if result.patch_sha256 is not None:
            data["patch_sha256"] = result.patch_sha256
        if result.suspect:
            data["suspect"] = [r.model_dump() for r in result.suspect]
        self.journal.event(None, "verdict", data)
        return result

    def _result(self, verdict: Verdict, detail: str) -> RunResult:
        return RunResult(verdict=verdict, detail=detail, turns=self.tally.turns, tokens=self.tally.tokens,
                         cost_usd=self.tally.cost_usd, verifier_runs=self.verifier_runs,
                         patch_sha256=self.passed_patch if verdict in VERIFIED else None,
                         suspect=self.suspect if verdict is Verdict.SUSPECT else ())

    def _infra_error(self, exc: Exception, where: str) -> tuple[Verdict, str]:
        error: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)[:2000], "where": where,
                 "context": {k: str(v)[:500] for k, v in getattr(exc, "context", {}).items()}}
        self.journal.event(None, "infra_error", error)
        return Verdict.INFRA_ERROR, f"{where}: {error['type']}: {error['message'][:500]}"

    def step(self) -> None:
        if self.cancel.is_set():
            raise RunEnded(Verdict.CANCELED, "canceled before the next turn")
        self.tally.check()
        turn = self.tally.turns
        envelope, call_ref = self.query(turn)
        self.tally.turns += 1
        appended: list[Message] = []
        try:
            self.act(turn, envelope, call_ref, appended)
        finally:
            self.journal.end_turn(turn, tuple(appended))
            if self.on_turn is not None:
                self.on_turn(turn, envelope, self.tally)

    def query(self, turn: int) -> tuple[Envelope, object]:
        request = self.context.build(turn, turns_left=self.tally.turns_left)
        self._record_context_events(turn)
        call_ref = self.journal.request(turn, request)
        self._constrained = request.constraint.kind if request.constraint is not None else None
        envelope = self.model.call(request, cancel=self.cancel)
        cost = self.cost_of(envelope)
        self.tally.add(envelope, cost)
        self.journal.envelope(turn, call_ref, envelope, cost)
        self.context.observe(envelope)
        self._record_context_events(turn)
        return envelope, call_ref

    def _record_context_events(self, turn: int) -> None:
        for event in self.context.drain_events():
            data = dict(event)
            self.journal.event(turn, str(data.pop("kind", "context")), data)

    def _append(self, message: Message, appended: list[Message], *, elidable: bool = False) -> None:
        self.context.append(message, elidable=elidable)
        appended.append(message)

    def act(self, turn: int, envelope: Envelope, call_ref: object, appended: list[Message]) -> None:
        action = route(envelope.status)
        self.journal.event(turn, "route", {"status": envelope.status.value, "action": action.value})
        if action in _ENDINGS:
            reason = (
                envelope.payload.refusal or (envelope.error.message if envelope.error else "") or envelope.status.value
            )
            raise RunEnded(_ENDINGS[action], reason)
        if action is Action.COMPACT:
            # Quarantined: the cut-off payload is never executed nor shown again;
            # the notice changes the next request so it is never resent as is.
            self._append(truncation_notice(envelope), appended)
            return
        if action is Action.FEEDBACK:
            self._append(stream_rejection(envelope), appended)
            return
        payload = release_from_escrow(envelope)
        calls = self.protocol.calls(payload, turn)
        self._append(self.protocol.assistant_message(payload, calls), appended)
        if not calls:
            self._not_honoured(turn, None, "no_call", "a completed answer without a tool call")
            self._append(no_tool_call(), appended)
            return
        submitted = passed = False
        for index, call in enumerate(calls):
            if submitted:  # the submitted patch is final: nothing after it in this answer runs
                outcome = self._refuse(turn, call_ref, index, call, "submit", AFTER_SUBMIT)
            elif (refusal := self._refusal(index)) is not None:
                outcome = self._refuse(turn, call_ref, index, call, LIMIT_LAYER, refusal)
            else:
                outcome = self._run_candidate(turn, call_ref, index, call)
            self._append(self.protocol.observation(call, outcome), appended, elidable=True)
            if call.name == SUBMIT_TOOL and outcome.verifier_passed is not None:
                submitted = True
                self.verifier_runs += 1
                if outcome.verifier_passed:
                    passed = True
                    self.passed_patch = outcome.patch_sha256
                    self.suspect = outcome.suspect
        if passed and self.suspect:  # passed, by a patch that reaches for the verification itself
            raise RunEnded(Verdict.SUSPECT, summary(self.suspect))
        if passed:  # a verified patch stands even if Ctrl-C came after its verifier
            raise RunEnded(Verdict.PASS, "the verifier passed")
        if self.cancel.is_set():
            self.journal.event(turn, "cancel", {"during": "tool calls"})
            raise RunEnded(Verdict.CANCELED, "canceled during a tool call")

    def _not_honoured(self, turn: int, index: int | None, layer: str, error: str) -> None:
        """Record that a constrained answer broke its constraint (the engine
        ignored it, or a server dropped the field); the call is judged as any."""
        if self._constrained is not None:
            self.journal.event(turn, NOT_HONOURED, {"kind": self._constrained, "call_index": index,
                                                    "layer": layer, "error": error[:500]})

    def _refusal(self, index: int) -> str | None:
        """Why call ``index`` of this answer may not run, if it may not: the
        limits hold inside a turn, not only between turns."""
        if self.cancel.is_set():
            return "the run was canceled; this call was not run"
        cap = self.tally.limits.max_tool_calls_per_answer
        if index >= cap:
            return f"more than {cap} tool calls in one answer (limits.max_tool_calls_per_answer); this call was not run"
        left = self.tally.time_left_s
        # The answer's first call runs with what is left (its command clamped
        # to it), so an offline replay, which takes no wall time, still meets
        # the recorded call where it was executed.
        if index > 0 and left is not None and left <= 0:
            return f"wall-time limit reached ({self.tally.limits.max_wall_s:g}s); this call was not run"
        return None

    def _refuse(self, turn: int, call_ref: object, index: int, call: ToolCall, layer: str, reason: str) -> ToolOutcome:
        """Record a candidate as REJECTED at ``layer`` without validating or running it."""
        candidate, ref = self._stage(turn, call_ref, index, call)
        candidate, validating = candidate.to(CandidateState.VALIDATING)
        _, rejected = candidate.to(CandidateState.REJECTED, layer=layer, reason=reason)
        self.journal.transition(ref, validating)
        self.journal.transition(ref, rejected)
        outcome = perimeter_rejection(layer, reason)
        self.journal.tool(ref, call.name, None, None, outcome)
        return outcome

    def _stage(self, turn: int, call_ref: object, index: int, call: ToolCall) -> tuple[Candidate, object]:
        candidate, staged = stage(index, call)
        ref = self.journal.candidate(turn, call_ref, index, call)
        self.journal.transition(ref, staged)
        return candidate, ref

    def _run_candidate(self, turn: int, call_ref: object, index: int, call: ToolCall) -> ToolOutcome:
        candidate, ref = self._stage(turn, call_ref, index, call)
        result = check_candidate(candidate, self.tools.arg_models(), self.acl, self.approve)
        for transition in result.transitions:
            self.journal.transition(ref, transition)
        if not result.committed:
            if result.layer == "parse":
                self._not_honoured(turn, index, "parse", result.error or "rejected")
            outcome = perimeter_rejection(result.layer, result.error or "rejected")
        else:
            assert result.args is not None
            outcome = self.tools.execute(call.name, result.args, time_left_s=self.tally.time_left_s)
        self.journal.tool(ref, call.name, result.args, result.decision, outcome)
        return outcome
