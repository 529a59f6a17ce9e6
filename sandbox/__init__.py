"""The hardened Docker sandbox: image build, one container per run, capped
exec with a process-tree-killing timeout, the tools and their entry point."""

from sandbox.capture import CappedOutput
from sandbox.container import Sandbox
from sandbox.daemon import connect, require_image
from sandbox.errors import (
    DaemonUnavailable, ExecError, ImageBuildError, ImageMissing, SandboxError, ToolArgumentError, WorkspaceError,
)
from sandbox.execution import ExecLimits, ExecOutcome
from sandbox.hardening import Finding, Hardening, audit
from sandbox.image import BuildResult, build_image
from sandbox.orphans import remove_orphans
from sandbox.toolbox import ToolBox, ToolResult
from sandbox.tools import (
    ARG_MODELS, BashArgs, EditFileArgs, ListFilesArgs, ReadFileArgs, SubmitArgs, ToolArgs, WriteFileArgs,
    parse_tool_call, tool_spec, tool_specs,
)
from sandbox.workspace import Patch, apply_patch

__all__ = [
    "ARG_MODELS", "BashArgs", "BuildResult", "CappedOutput", "DaemonUnavailable", "EditFileArgs", "ExecError",
    "ExecLimits", "ExecOutcome", "Finding", "Hardening", "ImageBuildError", "ImageMissing", "ListFilesArgs", "Patch",
    "ReadFileArgs", "Sandbox", "SandboxError", "SubmitArgs", "ToolArgs", "ToolArgumentError", "ToolBox", "ToolResult",
    "WorkspaceError", "WriteFileArgs", "apply_patch", "audit", "build_image", "connect", "parse_tool_call",
    "remove_orphans", "require_image", "tool_spec", "tool_specs",
]
