"""``SandboxTools``: the loop's Tools port over a ToolBox and its policy.

Offers every declared tool's argument model (so a call to a tool the policy
does not grant is denied by the loop's ACL with its rule, not mistaken for a
typo) and execution in the sandbox. The ACL itself is the loop's
(``orchestrator.perimeter``), the same for every Tools adapter.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from orchestrator.contract import ToolSpec
from orchestrator.ports import ToolOutcome
from orchestrator.toolset import TOOLS, ToolArgs
from policies import Policy
from sandbox.toolbox import ToolBox, ToolResult


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
    if result.evidence is not None:
        detail["evidence"] = result.evidence.model_dump(mode="json")
    if result.patch is not None:
        detail["patch_sha256"] = result.patch.sha256
        detail["patch_files"] = list(result.patch.files)
    return ToolOutcome(
        observation=result.observation,
        ok=result.ok,
        exit_code=result.exit_code,
        duration_s=result.duration_s,
        verifier_passed=result.verifier_passed,
        suspect=result.suspect,
        detail=detail,
    )


class SandboxTools:
    def __init__(self, toolbox: ToolBox, policy: Policy) -> None:
        self.toolbox = toolbox
        self.policy = policy

    def specs(self) -> tuple[ToolSpec, ...]:
        return self.toolbox.specs()

    def arg_models(self) -> Mapping[str, type[BaseModel]]:
        return TOOLS

    def execute(self, name: str, args: BaseModel, *, time_left_s: float | None = None) -> ToolOutcome:
        assert isinstance(args, ToolArgs)
        return outcome_of(self.toolbox.execute(name, args, time_left_s=time_left_s))
