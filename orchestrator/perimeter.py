"""The verification perimeter for one candidate, cheapest layer first:

1. parse   - the arguments are one complete JSON object;
2. schema  - they validate against the tool's pydantic model (extra forbidden);
3. policy  - the capability ACL allows the call (ask -> the approver decides);
4. dynamic - execution in the sandbox (done by the loop after COMMITTED).

Pure: the ACL decision and the approver arrive as callables. The ACL is
``acl_of(policy)``, one function for every Tools adapter (live, replay, test
doubles), so no adapter decides for itself. Every state change is returned as
a Transition so the loop can record it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from orchestrator.candidate import Candidate, CandidateState, Transition
from orchestrator.ports import DecisionLike
from orchestrator.toolset import ToolArgs
from policies import Policy, decide

Decide = Callable[[str, BaseModel], DecisionLike]
Approve = Callable[[Candidate, DecisionLike], bool]


def acl_of(policy: Policy) -> Decide:
    """The capability ACL the loop applies to every call: ``policies.decide``
    on the call's declared path accesses."""

    def decide_call(name: str, args: BaseModel) -> DecisionLike:
        if not isinstance(args, ToolArgs):  # only declared tools reach the ACL
            raise TypeError(f"{name}: {type(args).__name__} is not a declared tool's arguments")
        decision = decide(name, args, policy)
        return AclDecision(effect=decision.effect.value, rule=decision.rule, reason=decision.reason)

    return decide_call


@dataclass(frozen=True)
class AclDecision:
    """A ``policies.Decision`` as the loop records it: plain strings."""

    effect: str
    rule: str
    reason: str


def deny_all_asks(candidate: Candidate, decision: DecisionLike) -> bool:
    """The non-interactive approver: an "ask" without a human is a no."""
    return False


@dataclass(frozen=True)
class PerimeterResult:
    candidate: Candidate
    transitions: tuple[Transition, ...]
    layer: str
    args: BaseModel | None = None
    decision: DecisionLike | None = None
    error: str | None = None

    @property
    def committed(self) -> bool:
        return self.candidate.state is CandidateState.COMMITTED


def _reject(candidate: Candidate, trail: list[Transition], layer: str, error: str, **extra: Any) -> PerimeterResult:
    done, t = candidate.to(CandidateState.REJECTED, layer=layer, reason=error)
    return PerimeterResult(candidate=done, transitions=(*trail, t), layer=layer, error=error, **extra)


def _schema_errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:8]:
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def check_candidate(
    candidate: Candidate,
    arg_models: Mapping[str, type[BaseModel]],
    decide: Decide,
    approve: Approve = deny_all_asks,
) -> PerimeterResult:
    """Run the static layers on a STAGED candidate; returns it COMMITTED or REJECTED."""
    candidate, t = candidate.to(CandidateState.VALIDATING)
    trail = [t]
    call = candidate.call

    try:
        raw = json.loads(call.arguments) if call.arguments.strip() else {}
    except (json.JSONDecodeError, RecursionError) as exc:
        return _reject(candidate, trail, "parse", f"arguments are not valid JSON: {exc}")
    if not isinstance(raw, dict):
        return _reject(candidate, trail, "parse", f"arguments must be a JSON object, got {type(raw).__name__}")

    model = arg_models.get(call.name)
    if model is None:
        known = ", ".join(sorted(arg_models))
        return _reject(candidate, trail, "schema", f"unknown tool {call.name!r}; available: {known}")
    try:
        args = model.model_validate(raw)
    except ValidationError as exc:
        return _reject(candidate, trail, "schema", f"invalid arguments for {call.name}: {_schema_errors(exc)}")

    decision = decide(call.name, args)
    if decision.effect == "ask" and approve(candidate, decision):
        effect, why = "allow", f"approved by user ({decision.reason})"
    else:
        effect, why = decision.effect, decision.reason
    if effect != "allow":
        return _reject(
            candidate, trail, "policy", f"denied by policy rule {decision.rule}: {why}", args=args, decision=decision
        )
    done, t = candidate.to(CandidateState.COMMITTED, layer="policy", reason=f"allowed by {decision.rule}")
    return PerimeterResult(candidate=done, transitions=(*trail, t), layer="policy", args=args, decision=decision)
