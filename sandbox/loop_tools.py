"""``SandboxTools``: the loop's Tools port over a ToolBox and its policy.

Offers every known tool's argument model (so a call to a tool the policy does
not grant is denied by the ACL with its rule, not mistaken for a typo), the
pure ACL decision, and execution in the sandbox.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel

from orchestrator.contract import ToolSpec
from orchestrator.ports import ToolOutcome
from policies import Decision, Policy, decide
from sandbox.toolbox import ToolBox, ToolResult
from sandbox.tools import ARG_MODELS, ToolArgs


@dataclass(frozen=True)
class AclDecision:
    """A policies.Decision seen through the perimeter's DecisionLike."""

    effect: str
    rule: str
    reason: str

    @classmethod
    def of(cls, decision: Decision) -> "AclDecision":
        return cls(effect=decision.verdict.value, rule=decision.rule, reason=decision.reason)


def outcome_of(result: ToolResult) -> ToolOutcome:
    detail: dict[str, object] = {"timed_out": result.timed_out}
    if result.canceled:
        detail["canceled"] = True
    if result.resolved_path is not None:
        detail["resolved_path"] = result.resolved_path
        detail["resolved_rule"] = result.resolved_rule
    if result.stdout is not None:
        detail["stdout"] = result.stdout.model_dump()
    if result.stderr is not None:
        detail["stderr"] = result.stderr.model_dump()
    if result.patch is not None:
        detail["patch_sha256"] = result.patch.sha256
        detail["patch_files"] = list(result.patch.files)
    return ToolOutcome(
        observation=result.observation,
        ok=result.ok,
        exit_code=result.exit_code,
        duration_s=result.duration_s,
        verifier_passed=result.verifier_passed,
        detail=detail,
    )


class SandboxTools:
    def __init__(self, toolbox: ToolBox, policy: Policy) -> None:
        self.toolbox = toolbox
        self.policy = policy

    def specs(self) -> tuple[ToolSpec, ...]:
        return self.toolbox.specs()

    def arg_models(self) -> Mapping[str, type[BaseModel]]:
        return ARG_MODELS

    def decide(self, name: str, args: BaseModel) -> AclDecision:
        return AclDecision.of(decide(name, args, self.policy))  # type: ignore[arg-type]

    def execute(self, name: str, args: BaseModel, *, time_left_s: float | None = None) -> ToolOutcome:
        assert isinstance(args, ToolArgs)
        return outcome_of(self.toolbox.execute(name, args, time_left_s=time_left_s))
