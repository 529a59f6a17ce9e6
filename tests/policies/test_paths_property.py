"""Property: over 10,000 generated paths and grants, the ACL never allows a
path outside the workspace or outside its granted globs. The oracle below is
written independently of policies.paths (segment-wise fnmatch)."""

from __future__ import annotations

import fnmatch
import posixpath

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import Effect, PathAccess, Policy, decide
from policies.model import PathGrants, ToolGrants

SEGMENTS = st.sampled_from(["a", "b", "src", ".git", "..", ".", "", "x.py", "*", "?", "\x00", "workspace", "~",
                            "a b", "\\", "é", "...", ".hidden"])
RAW_PATHS = st.builds(lambda lead, segs: lead + "/".join(segs), st.sampled_from(["", "/", "/workspace/", "//", "./"]),
                      st.lists(SEGMENTS, min_size=0, max_size=7))
GLOBS = st.lists(st.sampled_from(["**", "src/**", "src/*.py", "a/*", "*.py", "a/**/x.py", "b/?", ".hidden"]),
                 min_size=0, max_size=3).map(tuple)


def oracle_match(glob: str, path: str) -> bool:
    """Segment matcher: '**' spans zero or more segments, fnmatch within one."""
    def rec(g: list[str], p: list[str]) -> bool:
        if not g:
            return not p
        if g[0] == "**":
            return any(rec(g[1:], p[i:]) for i in range(len(p) + 1))
        return bool(p) and fnmatch.fnmatchcase(p[0], g[0]) and "/" not in p[0] and rec(g[1:], p[1:])
    return rec(glob.split("/"), path.split("/"))


def oracle_inside(raw: str) -> str | None:
    """Workspace-relative path if ``raw`` lexically stays inside /workspace."""
    if "\x00" in raw or not raw.strip():
        return None
    full = posixpath.normpath(posixpath.join("/workspace", raw))
    if full.startswith("//"):
        full = "/" + full.lstrip("/")
    if full == "/workspace":
        return "."
    return full[len("/workspace/"):] if full.startswith("/workspace/") else None


@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=RAW_PATHS, read=GLOBS, write=GLOBS, deny=GLOBS, mode=st.sampled_from(["read", "write"]))
def test_acl_never_allows_outside_grants(raw, read, write, deny, mode):
    policy = Policy(tools=ToolGrants(allowed=("read_file", "write_file")),
                    paths=PathGrants(read=read, write=write or ("never-granted",), deny=deny))

    class Args:
        def path_accesses(self):
            return (PathAccess(mode=mode, path=raw),)

    decision = decide("write_file" if mode == "write" else "read_file", Args(), policy)
    if decision.effect is not Effect.ALLOW:
        return
    inside = oracle_inside(raw)
    assert inside is not None, f"allowed {raw!r}, which escapes the workspace"
    assert decision.paths == (inside,)
    granted = policy.paths.write if mode == "write" else policy.paths.read + policy.paths.write
    if inside == ".":
        assert "**" in granted and "**" not in deny
    else:
        assert any(oracle_match(g, inside) for g in granted), f"{inside!r} allowed without a matching grant"
        assert not any(oracle_match(g, inside) for g in deny), f"{inside!r} allowed despite a deny glob"
