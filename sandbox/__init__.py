"""The hardened Docker sandbox: image build, one container per run, capped
exec with a process-tree-killing timeout, and the ToolBox on which the tools
declared in ``orchestrator.toolset`` run."""

from sandbox.container import Sandbox
from sandbox.daemon import connect, require_image
from sandbox.errors import (
    DaemonUnavailable,
    ExecError,
    ImageBuildError,
    ImageMissing,
    SandboxError,
    WorkspaceError,
)
from sandbox.execution import ExecLimits, ExecOutcome
from sandbox.hardening import Finding, Hardening, audit
from sandbox.image import BuildResult, build_image
from sandbox.orphans import remove_orphans
from sandbox.tool_result import ToolResult
from sandbox.toolbox import ToolBox
from sandbox.workspace import Patch, apply_patch

__all__ = [
    "BuildResult", "DaemonUnavailable", "ExecError", "ExecLimits", "ExecOutcome", "Finding",
    "Hardening", "ImageBuildError", "ImageMissing", "Patch", "Sandbox", "SandboxError", "ToolBox", "ToolResult",
    "WorkspaceError", "apply_patch", "audit", "build_image", "connect", "remove_orphans", "require_image",
]
