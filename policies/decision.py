"""The ACL: a pure function from (tool, its validated arguments, policy) to a
Decision that names the rule that decided. No I/O, so a denial always
happens before any Docker call and every decision can be recorded and
replayed."""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from orchestrator.contract import Frozen
from orchestrator.toolset import TOOL_NAMES, PathAccess
from policies.model import Approval, Policy
from policies.paths import PathRejected, canonical_path, first_match


class Effect(str, Enum):
    """What the ACL decides for one call (a run's outcome is ``agent.Verdict``)."""

    ALLOW = "allow"
    DENY = "deny"
    ASK = "ask"


class Decision(Frozen):
    effect: Effect
    rule: str
    reason: str
    tool: str
    paths: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.effect is Effect.ALLOW


class HasPathAccesses(Protocol):
    def path_accesses(self) -> tuple[PathAccess, ...]: ...


def decide(tool: str, args: HasPathAccesses, policy: Policy) -> Decision:
    """Deny unknown or ungranted tools, then any path outside its grant, then
    apply the tool's approval mode."""
    if tool not in TOOL_NAMES:
        return Decision(effect=Effect.DENY, rule="tools.known", reason=f"unknown tool {tool!r}", tool=tool)
    if tool not in policy.tools.allowed:
        return Decision(
            effect=Effect.DENY, rule="tools.allowed", tool=tool,
            reason=f"tool {tool!r} is not granted by policy {policy.name!r}",
        )
    approval = policy.tools.approval_for(tool)
    if approval is Approval.DENY:
        return Decision(effect=Effect.DENY, rule=f"tools.approval.{tool}", tool=tool, reason=f"{tool} is set to deny")
    canonical: list[str] = []
    rules: list[str] = []
    for access in args.path_accesses():
        verdict = _judge_path(access, policy)
        if isinstance(verdict, Decision):
            return verdict.model_copy(update={"tool": tool})
        path, rule = verdict
        canonical.append(path)
        rules.append(rule)
    if approval is Approval.ASK:
        return Decision(
            effect=Effect.ASK, rule=f"tools.approval.{tool}", tool=tool, paths=tuple(canonical),
            reason=f"{tool} needs a person's approval under policy {policy.name!r}",
        )
    return Decision(
        effect=Effect.ALLOW, rule=" ".join(["tools.allowed", *rules]), tool=tool, paths=tuple(canonical),
        reason="granted" + (f" for {', '.join(canonical)}" if canonical else ""),
    )


def _judge_path(access: PathAccess, policy: Policy) -> Decision | tuple[str, str]:
    try:
        path = canonical_path(access.path)
    except PathRejected as exc:
        return Decision(effect=Effect.DENY, rule="paths.canonical", reason=str(exc), tool="")
    denied = first_match(policy.paths.deny, path)
    if denied is not None:
        return Decision(
            effect=Effect.DENY, rule=f"paths.deny[{denied}]", tool="", paths=(path,),
            reason=f"{path} matches deny glob {denied!r}",
        )
    grants = policy.paths.write if access.mode == "write" else policy.paths.read + policy.paths.write
    granted = first_match(grants, path)
    if granted is None:
        return Decision(
            effect=Effect.DENY, rule=f"paths.{access.mode}", tool="", paths=(path,),
            reason=f"{access.mode} of {path} is not granted by any paths.{access.mode} glob",
        )
    section = "write" if access.mode == "write" or granted not in policy.paths.read else "read"
    return path, f"paths.{section}[{granted}]"
