"""Read a policy file, or the shipped default, and explain what it grants."""

from __future__ import annotations

import difflib
import tomllib
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ValidationError

from orchestrator.errors import ConfigError
from orchestrator.exit_codes import ExitCode
from orchestrator.toolset import TOOL_NAMES
from policies.model import FlagReason, Policy


class PolicyError(ConfigError):
    """A policy file is missing, not TOML, or grants something malformed."""

    exit_code = ExitCode.POLICY_INVALID


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"policy {source} is not valid TOML: {exc}", path=source) from exc
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_problem(e["loc"], e["type"], e["msg"]) for e in exc.errors())
        raise PolicyError(f"policy {source} is invalid: {problems}", path=source) from exc


def _problem(loc: tuple[int | str, ...], kind: str, message: str) -> str:
    """One validation error in the file's words: an unknown key is named with
    its table, and the nearest known key offered (a misspelling, mostly)."""
    where = ".".join(map(str, loc)) or "(top)"
    if kind != "extra_forbidden" or not loc:
        return f"{where}: {message}"
    known = _keys_at(loc[:-1])
    table = f"[{'.'.join(map(str, loc[:-1]))}]" if len(loc) > 1 else "the top level"
    near = difflib.get_close_matches(str(loc[-1]), known, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else f" (it takes {', '.join(known)})" if known else ""
    return f"unknown key {str(loc[-1])!r} in {table}{hint}"


def _keys_at(path: tuple[int | str, ...]) -> list[str]:
    """The keys the policy's table at ``path`` takes, or none where it is not a table of fixed keys."""
    model: type[BaseModel] = Policy
    for part in path:
        field = model.model_fields.get(str(part))
        kind = field.annotation if field is not None else None
        if not (isinstance(kind, type) and issubclass(kind, BaseModel)):
            return []
        model = kind
    return sorted(model.model_fields)


def load_policy(path: Path | None) -> Policy:
    """The policy at ``path``; the shipped default when ``path`` is None."""
    if path is None:
        return default_policy()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PolicyError(f"policy file {path} does not exist", path=str(path)) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"policy file {path} cannot be read: {exc}", path=str(path)) from exc
    return parse_policy(text, str(path))


def default_policy() -> Policy:
    text = resources.files("policies").joinpath("default.toml").read_text(encoding="utf-8")
    return parse_policy(text, "policies/default.toml")


def explain(policy: Policy) -> list[str]:
    """One plain sentence per grant, for ``escrow policy check``."""
    lines = [f"policy {policy.name!r}: {policy.description or '(no description)'}"]
    for tool in TOOL_NAMES:
        if tool in policy.tools.allowed:
            lines.append(f"tool {tool}: allowed, approval {policy.tools.approval_for(tool).value}")
        else:
            lines.append(f"tool {tool}: not granted")
    paths = policy.paths
    lines.append(f"read paths: {', '.join(paths.read) or 'none'} (write globs are readable too)")
    lines.append(f"write paths: {', '.join(paths.write) or 'none'}")
    lines.append(f"denied paths (win over grants): {', '.join(paths.deny) or 'none'}")
    if "bash" in policy.tools.allowed:
        lines.append("note: bash can touch any file inside the sandbox; path globs bind the file tools")
    lines.append("network: " + ("ENABLED (bridge network)" if policy.network.enabled else "none"))
    r = policy.resources
    lines.append(
        f"resources: {r.memory_mb} MiB memory (no swap), {r.cpus} CPU, {r.pids} pids, /tmp {r.tmp_mb} MiB, "
        f"workspace {r.workspace_mb} MiB and {r.workspace_files} files"
    )
    lines.append(
        f"per command: timeout {r.command_timeout_s:g}s, stdout cap {r.stdout_cap_bytes} B, "
        f"stderr cap {r.stderr_cap_bytes} B, read cap {r.read_cap_bytes} B"
    )
    lim = policy.limits
    lines.append(
        f"run limits: {lim.max_turns} turns, {lim.max_tokens} tokens, ${lim.max_cost_usd:g}, {lim.max_wall_s:g}s wall"
    )
    v = policy.verify
    lines.append(f"verifier: {len(v.protect)} protected globs (from the starting copy, whatever the patch did)")
    if v.hidden:
        lines.append(f"verifier: hidden from the model, given only to the verifier: {', '.join(v.hidden)}")
    if v.reads:
        lines.append(f"verifier: MAY READ denied paths {', '.join(v.reads)} (exposed to code the model wrote)")
    if v.accept:
        lines.append(f"verifier: ACCEPTS as the patch made them, past its allow-list: {', '.join(v.accept)} "
                     "(binaries, plugins, packages and test inputs there reach the verifier)")
    else:
        lines.append("verifier: takes only the patch's UTF-8 text of the repo's kinds (allow-list)")
    granted = policy.apply.allowed_reasons()
    refused = [r.value for r in FlagReason if r not in granted]
    lines.append("--apply: " + (f"refuses patches touching {', '.join(refused)}" if refused else "refuses no path"))
    # Text that diffs as binary is written by default (flagged, shown): only a change of that is news.
    explicit = sorted(r.value for r in granted if r is not FlagReason.BINARY_TEXT)
    if explicit:
        lines.append(f"--apply: EXPLICITLY ALLOWED to write {', '.join(explicit)} into your checkout")
    return lines
