"""The tools the model may call, each declared once: its argument model (the
schema layer of the perimeter, and the JSON schema offered to the model), its
description, the paths a call touches (the ACL's input) and what it does.

What a tool does is written against ``ToolHost``, the sandbox's three
primitives (run a command, run a file operation, judge a submission), so this
module stays pure and the sandbox, replay and test doubles share one
declaration. Adding a tool means adding one class here and to ``TOOLS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import Field, field_validator

from orchestrator.contract import Frozen, ToolSpec

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

LIST_MAX_ENTRIES = 500


class PathAccess(Frozen):
    """One path a tool call would touch, as the model wrote it."""

    mode: Literal["read", "write"]
    path: str


class ToolHost(Protocol[R_co]):
    """Where tools run: the sandbox's ToolBox implements these primitives.
    ``time_left_s`` is the run's remaining wall time (None: no limit); no
    command of the call runs past it."""

    def command(self, tool: str, command: str, timeout_s: float | None, *, time_left_s: float | None) -> R_co: ...

    def file_op(self, tool: FileToolArgs, request: dict[str, object], *, time_left_s: float | None) -> R_co: ...

    def submit(self, *, time_left_s: float | None) -> R_co: ...


class ToolArgs(Frozen):
    """A validated call of one tool. ``name`` is the tool's name."""

    name: ClassVar[str]

    def path_accesses(self) -> tuple[PathAccess, ...]:
        return ()

    def run(self, host: ToolHost[R], *, time_left_s: float | None) -> R:
        raise NotImplementedError


class FileToolArgs(ToolArgs):
    """A tool on one workspace path, run by the sandbox's file-operation
    script after the path is resolved and judged again where it lives."""

    path: str

    def request(self) -> dict[str, object]:
        raise NotImplementedError

    def describe(self, reply: Mapping[str, Any]) -> str:
        """The observation for a successful reply."""
        raise NotImplementedError

    def run(self, host: ToolHost[R], *, time_left_s: float | None) -> R:
        return host.file_op(self, self.request(), time_left_s=time_left_s)


class BashArgs(ToolArgs):
    """Run a bash command in the sandbox (cwd /workspace, no network). Output is capped; the command is killed at
    the timeout."""

    name: ClassVar[str] = "bash"
    command: str = Field(min_length=1, max_length=100_000, description="The bash command line.")
    timeout_s: float | None = Field(default=None, gt=0,
                                    description="Seconds before the command is killed (capped by policy).")

    @field_validator("command")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("command contains a NUL byte")
        return value

    def run(self, host: ToolHost[R], *, time_left_s: float | None) -> R:
        return host.command(self.name, self.command, self.timeout_s, time_left_s=time_left_s)


class ReadFileArgs(FileToolArgs):
    """Read a text file from the workspace, optionally a range of lines."""

    name: ClassVar[str] = "read_file"
    path: str = Field(description="Workspace-relative path.")
    start_line: int = Field(default=1, ge=1, description="First line to return (1-based).")
    max_lines: int | None = Field(default=None, ge=1, description="How many lines to return (default: all).")

    def path_accesses(self) -> tuple[PathAccess, ...]:
        return (PathAccess(mode="read", path=self.path),)

    def request(self) -> dict[str, object]:
        return {"op": "read", "path": self.path, "start_line": self.start_line, "max_lines": self.max_lines}

    def describe(self, reply: Mapping[str, Any]) -> str:
        if not reply["truncated"]:
            return str(reply["content"])
        return f"{reply['content']}\n[truncated at {len(reply['content'].encode())} bytes of {reply['total_bytes']}]"


class WriteFileArgs(FileToolArgs):
    """Create or overwrite a file in the workspace with the given content."""

    name: ClassVar[str] = "write_file"
    path: str = Field(description="Workspace-relative path.")
    content: str = Field(max_length=5_000_000, description="The complete new file content.")

    def path_accesses(self) -> tuple[PathAccess, ...]:
        return (PathAccess(mode="write", path=self.path),)

    def request(self) -> dict[str, object]:
        return {"op": "write", "path": self.path, "content": self.content}

    def describe(self, reply: Mapping[str, Any]) -> str:
        return f"wrote {reply['bytes']} bytes to {self.path}"


class EditFileArgs(FileToolArgs):
    """Replace exactly one occurrence of `old` with `new` in a file. Fails if `old` is missing or occurs more than
    once."""

    name: ClassVar[str] = "edit_file"
    path: str = Field(description="Workspace-relative path.")
    old: str = Field(min_length=1, description="Exact text to replace; must occur exactly once.")
    new: str = Field(description="Replacement text.")

    def path_accesses(self) -> tuple[PathAccess, ...]:
        return (PathAccess(mode="write", path=self.path),)

    def request(self) -> dict[str, object]:
        return {"op": "edit", "path": self.path, "old": self.old, "new": self.new}

    def describe(self, reply: Mapping[str, Any]) -> str:
        return f"edited {self.path} at line {reply['line']} (-{reply['removed']} +{reply['added']} lines)"


class ListFilesArgs(FileToolArgs):
    """List files and directories under a workspace path (dirs end with '/', symlinks with '@')."""

    name: ClassVar[str] = "list_files"
    path: str = Field(default=".", description="Workspace-relative directory.")
    depth: int = Field(default=2, ge=1, le=10, description="How many levels to descend.")

    def path_accesses(self) -> tuple[PathAccess, ...]:
        return (PathAccess(mode="read", path=self.path),)

    def request(self) -> dict[str, object]:
        return {"op": "list", "path": self.path, "depth": self.depth, "max_entries": LIST_MAX_ENTRIES}

    def describe(self, reply: Mapping[str, Any]) -> str:
        more = f"\n[{reply['total'] - len(reply['entries'])} more entries not shown]" if reply["truncated"] else ""
        return "\n".join(reply["entries"]) + more


class SubmitArgs(ToolArgs):
    """Declare the task done. The task's verifier runs in the sandbox; only its result counts."""

    name: ClassVar[str] = "submit"
    summary: str = Field(default="", max_length=4000, description="What was changed and why.")

    def run(self, host: ToolHost[R], *, time_left_s: float | None) -> R:
        return host.submit(time_left_s=time_left_s)


TOOLS: dict[str, type[ToolArgs]] = {
    tool.name: tool for tool in (BashArgs, ReadFileArgs, WriteFileArgs, EditFileArgs, ListFilesArgs, SubmitArgs)
}
TOOL_NAMES: tuple[str, ...] = tuple(TOOLS)


def tool_spec(name: str) -> ToolSpec:
    model = TOOLS[name]
    schema = model.model_json_schema()
    schema.pop("description", None)
    schema.pop("title", None)
    description = " ".join((model.__doc__ or "").split())
    return ToolSpec(name=name, description=description, parameters=schema)


def tool_specs(allowed: tuple[str, ...] = TOOL_NAMES) -> tuple[ToolSpec, ...]:
    """Specs of the allowed tools, in the fixed order of TOOL_NAMES."""
    return tuple(tool_spec(name) for name in TOOL_NAMES if name in allowed)
