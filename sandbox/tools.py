"""Tool argument models and the ToolSpecs offered to the model.

Each model forbids extra fields (the schema layer of the verification
perimeter) and says which paths the call would touch (input to the ACL).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, ValidationError, field_validator

from orchestrator.contract import Frozen, ToolCall, ToolSpec
from policies import TOOL_NAMES, PathAccess
from sandbox.errors import ToolArgumentError


class ToolArgs(Frozen):
    def path_accesses(self) -> tuple[PathAccess, ...]:
        return ()


class BashArgs(ToolArgs):
    """Run a bash command in the sandbox (cwd /workspace, no network). Output is capped; the command is killed at the timeout."""

    command: str = Field(min_length=1, max_length=100_000, description="The bash command line.")
    timeout_s: float | None = Field(default=None, gt=0, description="Seconds before the command is killed (capped by policy).")

    @field_validator("command")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("command contains a NUL byte")
        return value


class ReadFileArgs(ToolArgs):
    """Read a text file from the workspace, optionally a range of lines."""

    path: str = Field(description="Workspace-relative path.")
    start_line: int = Field(default=1, ge=1, description="First line to return (1-based).")
    max_lines: int | None = Field(default=None, ge=1, description="How many lines to return (default: all).")

    def path_accesses(self) -> tuple[PathAccess, ...]:
        return (PathAccess(mode="read", path=self.path),)


class WriteFileArgs(ToolArgs):
    """Create or overwrite a file in the workspace with the given content."""

    path: str = Field(description="Workspace-relative path.")
    content: str = Field(max_length=5_000_000, description="The complete new file content.")

    def path_accesses(self) -> tuple[PathAccess, ...]:
        return (PathAccess(mode="write", path=self.path),)


class EditFileArgs(ToolArgs):
    """Replace exactly one occurrence of `old` with `new` in a file. Fails if `old` is missing or occurs more than once."""

    path: str = Field(description="Workspace-relative path.")
    old: str = Field(min_length=1, description="Exact text to replace; must occur exactly once.")
    new: str = Field(description="Replacement text.")

    def path_accesses(self) -> tuple[PathAccess, ...]:
        return (PathAccess(mode="write", path=self.path),)


class ListFilesArgs(ToolArgs):
    """List files and directories under a workspace path (dirs end with '/', symlinks with '@')."""

    path: str = Field(default=".", description="Workspace-relative directory.")
    depth: int = Field(default=2, ge=1, le=10, description="How many levels to descend.")

    def path_accesses(self) -> tuple[PathAccess, ...]:
        return (PathAccess(mode="read", path=self.path),)


class SubmitArgs(ToolArgs):
    """Declare the task done. The task's verifier runs in the sandbox; only its result counts."""

    summary: str = Field(default="", max_length=4000, description="What was changed and why.")


ARG_MODELS: dict[str, type[ToolArgs]] = {
    "bash": BashArgs,
    "read_file": ReadFileArgs,
    "write_file": WriteFileArgs,
    "edit_file": EditFileArgs,
    "list_files": ListFilesArgs,
    "submit": SubmitArgs,
}
assert tuple(ARG_MODELS) == TOOL_NAMES


def tool_spec(name: str) -> ToolSpec:
    model = ARG_MODELS[name]
    schema = model.model_json_schema()
    schema.pop("description", None)
    schema.pop("title", None)
    return ToolSpec(name=name, description=(model.__doc__ or "").strip(), parameters=schema)


def tool_specs(allowed: tuple[str, ...] = TOOL_NAMES) -> tuple[ToolSpec, ...]:
    """Specs of the allowed tools, in the fixed order of TOOL_NAMES."""
    return tuple(tool_spec(name) for name in TOOL_NAMES if name in allowed)


def parse_tool_call(call: ToolCall) -> ToolArgs:
    """The parse and schema layers: JSON object text -> validated argument model.
    Raises ToolArgumentError with a message fit to show the model."""
    model = ARG_MODELS.get(call.name)
    if model is None:
        raise ToolArgumentError(f"unknown tool {call.name!r}; available: {', '.join(TOOL_NAMES)}", tool=call.name)
    try:
        data: Any = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        raise ToolArgumentError(f"arguments of {call.name} are not valid JSON: {exc}", tool=call.name) from exc
    if not isinstance(data, dict):
        raise ToolArgumentError(f"arguments of {call.name} must be a JSON object", tool=call.name)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(args)'}: {e['msg']}" for e in exc.errors())
        raise ToolArgumentError(f"invalid arguments for {call.name}: {problems}", tool=call.name) from exc
