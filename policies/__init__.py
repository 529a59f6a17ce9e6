"""Capability policies: the policy file model, loading, and the pure ACL decision."""

from orchestrator.toolset import TOOL_NAMES, PathAccess
from policies.decision import Decision, Effect, HasPathAccesses, decide
from policies.loading import PolicyError, default_policy, explain, load_policy, parse_policy
from policies.model import (
    ApplyGrants,
    Approval,
    Flag,
    FlagReason,
    NetworkGrant,
    PathGrants,
    Policy,
    Resources,
    RunLimits,
    ToolGrants,
    VerifyGrants,
)
from policies.paths import WORKSPACE, PathRejected, canonical_path, glob_matches

__all__ = [
    "TOOL_NAMES", "WORKSPACE", "ApplyGrants", "Approval", "Decision", "Flag", "FlagReason", "HasPathAccesses",
    "NetworkGrant", "PathAccess", "PathGrants", "PathRejected", "Policy", "PolicyError", "Resources", "RunLimits",
    "ToolGrants", "VerifyGrants", "Effect", "canonical_path", "decide", "default_policy", "explain", "glob_matches",
    "load_policy", "parse_policy",
]
