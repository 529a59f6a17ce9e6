"""The policy file's shape: a frozen, extra-forbidding model, so a typo in a
policy is an error rather than a silently ignored grant."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, field_validator, model_validator

from orchestrator.contract import Frozen

TOOL_NAMES = ("bash", "read_file", "write_file", "edit_file", "list_files", "submit")


class Approval(str, Enum):
    AUTO = "auto"
    ASK = "ask"
    DENY = "deny"


class ToolGrants(Frozen):
    allowed: tuple[str, ...] = ("read_file", "list_files", "submit")
    approval: dict[str, Approval] = Field(default_factory=dict)
    default_approval: Approval = Approval.AUTO

    @field_validator("allowed")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(value) - set(TOOL_NAMES))
        if unknown:
            raise ValueError(f"unknown tool(s) {unknown}; known: {list(TOOL_NAMES)}")
        return tuple(sorted(set(value), key=TOOL_NAMES.index))

    @field_validator("approval")
    @classmethod
    def _known_keys(cls, value: dict[str, Approval]) -> dict[str, Approval]:
        unknown = sorted(set(value) - set(TOOL_NAMES))
        if unknown:
            raise ValueError(f"approval for unknown tool(s) {unknown}")
        return value

    def approval_for(self, tool: str) -> Approval:
        return self.approval.get(tool, self.default_approval)


class PathGrants(Frozen):
    """Workspace-relative globs: ``*`` one segment, ``**`` any depth, ``?`` one char.
    ``deny`` wins over ``read``/``write``."""

    read: tuple[str, ...] = ("**",)
    write: tuple[str, ...] = ()
    deny: tuple[str, ...] = (".git/**",)

    @field_validator("read", "write", "deny")
    @classmethod
    def _relative(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for glob in value:
            if not glob or glob.startswith("/") or "\x00" in glob or ".." in glob.split("/"):
                raise ValueError(f"glob {glob!r} must be non-empty, workspace-relative and without '..'")
        return value


class NetworkGrant(Frozen):
    enabled: bool = False


class Resources(Frozen):
    memory_mb: int = Field(default=1024, ge=64, le=65536)
    cpus: float = Field(default=1.0, gt=0, le=64)
    pids: int = Field(default=256, ge=16, le=32768)
    tmp_mb: int = Field(default=64, ge=1, le=16384)
    workspace_mb: int = Field(default=512, ge=16, le=65536)
    command_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    stdout_cap_bytes: int = Field(default=16384, ge=256, le=10_000_000)
    stderr_cap_bytes: int = Field(default=8192, ge=256, le=10_000_000)
    read_cap_bytes: int = Field(default=65536, ge=256, le=10_000_000)


class RunLimits(Frozen):
    max_turns: int = Field(default=30, ge=1)
    max_tokens: int = Field(default=200_000, ge=1)
    max_cost_usd: float = Field(default=1.0, ge=0)
    max_wall_s: float = Field(default=1800.0, gt=0)
    # Calls past this many in one answer are refused (recorded, not run).
    max_tool_calls_per_answer: int = Field(default=16, ge=1, le=1000)


class Policy(Frozen):
    name: str = "unnamed"
    description: str = ""
    tools: ToolGrants = ToolGrants()
    paths: PathGrants = PathGrants()
    network: NetworkGrant = NetworkGrant()
    resources: Resources = Resources()
    limits: RunLimits = RunLimits()

    @model_validator(mode="after")
    def _write_tools_need_write_globs(self) -> "Policy":
        writers = {"write_file", "edit_file"} & set(self.tools.allowed)
        if writers and not self.paths.write:
            raise ValueError(f"tools {sorted(writers)} are allowed but paths.write grants no path")
        return self
