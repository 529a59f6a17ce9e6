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
from sandbox.tool_result import ToolResult
from sandbox.toolbox import ToolBox


def outcome_of(result: ToolResult) -> ToolOutcome:
    """The loop's shape of a ToolBox result: the patch by its sha256 and
    files (the Patch itself stays with the ToolBox's ``submitted``)."""
    patch = result.patch
    return ToolOutcome(
        observation=result.observation, ok=result.ok, exit_code=result.exit_code, duration_s=result.duration_s,
        stdout=result.stdout, stderr=result.stderr, timed_out=result.timed_out, canceled=result.canceled,
        verifier_passed=result.verifier_passed, evidence=result.evidence, suspect=result.suspect,
        patch_sha256=patch.sha256 if patch is not None else None,
        patch_files=tuple(patch.files) if patch is not None else None,
        resolved_path=result.resolved_path, resolved_rule=result.resolved_rule,
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
