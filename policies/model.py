"""The policy file's shape: a frozen, extra-forbidding model, so a typo in a
policy is an error rather than a silently ignored grant."""

from __future__ import annotations

import re
from enum import Enum
from typing import Literal

from pydantic import Field, field_validator, model_validator

from orchestrator.contract import Frozen
from orchestrator.toolset import TOOL_NAMES


class FlagReason(str, Enum):
    """Why a path the patch touched is flagged: shown with the patch, and
    applying it needs the matching [apply] grant."""

    GIT_METADATA = "git metadata"
    CI_CONFIG = "CI configuration"
    OUTSIDE_REPO = "outside the repo"
    PROTECTED = "protected verifier input"
    HIDDEN = "hidden verifier input"
    SHADOWING = "shadows an installed module"
    BINARY_TEXT = "text that diffs as binary"
    NOT_ACCEPTED = "not accepted for verification"


class Flag(Frozen):
    """A path the patch touched that needs a look: why (a ``FlagReason``
    value) and what became of it in the verifier's copy."""

    path: str
    reason: str
    detail: str = ""

    @classmethod
    def from_recorded(cls, item: object) -> "Flag":
        """A patch event's flag; runs recorded before reasons were kept have the path alone."""
        if isinstance(item, dict):
            return cls.model_validate(item)
        return cls(path=str(item), reason="")


class Approval(str, Enum):
    AUTO = "auto"
    ASK = "ask"
    DENY = "deny"


class ToolGrants(Frozen):
    allowed: tuple[str, ...] = ("read_file", "list_files", "submit")
    approval: dict[str, Approval] = Field(default_factory=dict)
    default_approval: Approval = Approval.AUTO
    # Constrained decoding of tool calls (settings.constrain overrides): auto
    # is tools where the engine probe says the engine supports it, else off.
    constrain: Literal["auto", "tools", "off"] = "auto"

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
        return _workspace_globs(value)


class NetworkGrant(Frozen):
    enabled: bool = False


class Resources(Frozen):
    memory_mb: int = Field(default=1024, ge=64, le=65536)
    cpus: float = Field(default=1.0, gt=0, le=64)
    pids: int = Field(default=256, ge=16, le=32768)
    tmp_mb: int = Field(default=64, ge=1, le=16384)
    workspace_mb: int = Field(default=512, ge=16, le=65536)
    # Files and directories a submitted workspace may hold: past this the
    # export is refused (the model's verdict), since each entry costs the
    # verifier's copy time and inodes whatever its size.
    workspace_files: int = Field(default=50_000, ge=100, le=10_000_000)
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


class ApplyGrants(Frozen):
    """What ``--apply`` may write besides ordinary files. A patch that touches
    git metadata, CI configuration or paths outside the repo is refused unless
    granted here."""

    git_metadata: bool = False
    ci_config: bool = False
    outside_repo: bool = False
    verifier_inputs: bool = False  # protected or hidden [verify] paths
    shadowing_modules: bool = False  # modules the verifier left out as shadowing installed ones
    binary_text: bool = True  # files that look like text but diff as binary (shown, flagged, written)
    unaccepted_files: bool = False  # files the verifier's allow-list left out or took from the starting copy

    def allowed_reasons(self) -> frozenset[FlagReason]:
        """The flag reasons (``FlagReason``) granted."""
        grants = {FlagReason.GIT_METADATA: self.git_metadata, FlagReason.CI_CONFIG: self.ci_config,
                  FlagReason.OUTSIDE_REPO: self.outside_repo, FlagReason.PROTECTED: self.verifier_inputs,
                  FlagReason.HIDDEN: self.verifier_inputs, FlagReason.SHADOWING: self.shadowing_modules,
                  FlagReason.BINARY_TEXT: self.binary_text, FlagReason.NOT_ACCEPTED: self.unaccepted_files}
        return frozenset(reason for reason, granted in grants.items() if granted)


# CI configuration runs code with the repo's secrets once pushed, and may run
# the project's tests: its paths are protected verifier inputs, and a patch
# that touches them needs an [apply] grant.
CI_CONFIG_GLOBS = (
    ".github/workflows/**", ".github/actions/**", ".circleci/**", ".gitlab/**", ".buildkite/**", ".woodpecker/**",
    ".gitlab-ci.yml", ".travis.yml", "Jenkinsfile", "azure-pipelines.yml", "bitbucket-pipelines.yml",
    ".drone.yml", "appveyor.yml", ".woodpecker.yml",
)
# What decides a Python test run besides the code under test: the test files,
# pytest's configuration files wherever they are, and CI configuration.
DEFAULT_PROTECT = (
    "**/conftest.py", "**/pytest.ini", "**/.pytest.ini", "**/pytest.toml", "**/.pytest.toml", "**/tox.ini",
    "**/setup.cfg", "**/pyproject.toml", "**/noxfile.py", "**/test_*.py", "**/*_test.py", "**/tests/**",
    *CI_CONFIG_GLOBS,
)


def _workspace_globs(value: tuple[str, ...]) -> tuple[str, ...]:
    for glob in value:
        if not glob or glob.startswith("/") or "\x00" in glob or ".." in glob.split("/"):
            raise ValueError(f"glob {glob!r} must be non-empty, workspace-relative and without '..'")
    return value


class VerifyGrants(Frozen):
    """What the verifier's container holds besides the model's patch.

    ``protect``: paths that come from the starting copy in the verifier's
    container, whatever the patch did to them (the patch still shows the
    change, flagged). ``hidden``: paths removed from the model's copy, so it
    can neither read nor list them, and given only to the verifier.
    ``reads``: paths the policy denies to the model that the verifier may
    still hold; the verifier runs code the model wrote, so such a grant
    exposes them to it. ``accept``: paths the verifier takes as the patch
    made them past its allow-list (``sandbox/verifier_accept.py``: text of
    the starting copy's kinds, no new importable name, plugin or test input);
    hidden, denied, protected and shadowing paths are still kept out.
    ``verifier_output``: what a submit's observation quotes of the verifier,
    ``summary`` (the verdict, the counts, the failed required tests' ids,
    failure messages only of tests the model may read) or ``full`` (its
    output as well); unset, ``summary`` when hidden or reference tests
    exist, else ``full``."""

    protect: tuple[str, ...] = DEFAULT_PROTECT
    hidden: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    accept: tuple[str, ...] = ()
    verifier_output: Literal["summary", "full"] | None = None

    @field_validator("protect", "hidden", "reads", "accept")
    @classmethod
    def _relative(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return _workspace_globs(value)


class Volatile(Frozen):
    """A volatile field of tool output: every match of ``pattern`` (a Python
    regular expression) is replaced by ``replacement`` before a re-executed
    output is compared with the recorded one."""

    name: str
    pattern: str
    replacement: str

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


DEFAULT_VOLATILE = (
    Volatile(name="timestamp", pattern=r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?",
             replacement="<timestamp>"),
    Volatile(name="clock", pattern=r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b", replacement="<time>"),
    Volatile(name="duration", pattern=r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds|min)\b",
             replacement="<duration>"),
    Volatile(name="temp_path", pattern="/tmp/[^\\s'\":,)\\]]+", replacement="<tmp>"),
    Volatile(name="address", pattern=r"\b0x[0-9a-fA-F]{6,16}\b", replacement="<address>"),
)


class ReplayPolicy(Frozen):
    """How ``escrow replay --reexecute`` tells noise from drift: outputs that
    differ only in these volatile fields are noise."""

    volatile: tuple[Volatile, ...] = DEFAULT_VOLATILE


class Policy(Frozen):
    name: str = "unnamed"
    description: str = ""
    tools: ToolGrants = ToolGrants()
    paths: PathGrants = PathGrants()
    network: NetworkGrant = NetworkGrant()
    resources: Resources = Resources()
    limits: RunLimits = RunLimits()
    apply: ApplyGrants = ApplyGrants()
    verify: VerifyGrants = VerifyGrants()
    replay: ReplayPolicy = ReplayPolicy()

    @model_validator(mode="after")
    def _write_tools_need_write_globs(self) -> "Policy":
        writers = {"write_file", "edit_file"} & set(self.tools.allowed)
        if writers and not self.paths.write:
            raise ValueError(f"tools {sorted(writers)} are allowed but paths.write grants no path")
        return self
