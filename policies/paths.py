"""Pure path canonicalisation and glob matching for the ACL.

A path is reduced to a workspace-relative POSIX path *lexically*; anything
that cannot be (NUL, ``..`` above the root, an absolute path outside the
workspace) is rejected. Symlinks cannot be judged here; the sandbox checks
them again inside the container, where they live.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from functools import lru_cache

WORKSPACE = "/workspace"


class PathRejected(ValueError):
    """The raw path can never name something inside the workspace."""


def canonical_path(raw: str, workspace: str = WORKSPACE) -> str:
    """Workspace-relative canonical form; ``"."`` is the workspace itself."""
    if not isinstance(raw, str):
        raise PathRejected("path must be a string")
    if "\x00" in raw:
        raise PathRejected("path contains a NUL byte")
    if raw.strip() == "":
        raise PathRejected("path is empty")
    if raw.startswith("/"):
        absolute = posixpath.normpath(raw)
        if absolute.startswith("//"):  # POSIX keeps a leading '//' as-is
            absolute = "/" + absolute.lstrip("/")
        if absolute == workspace:
            return "."
        if not absolute.startswith(workspace + "/"):
            raise PathRejected(f"absolute path {raw!r} is outside the workspace {workspace}")
        return absolute[len(workspace) + 1 :]
    relative = posixpath.normpath(raw)
    if relative == ".." or relative.startswith("../"):
        raise PathRejected(f"path {raw!r} escapes the workspace")
    return relative


@lru_cache(maxsize=1024)
def _compile(glob: str) -> re.Pattern[str]:
    out: list[str] = []
    i = 0
    while i < len(glob):
        if glob.startswith("/**", i) and i + 3 == len(glob):
            # "dir/**" also covers "dir" itself: a deny of secrets/** must hold for
            # list_files secrets, as a grant of src/** covers the directory src.
            out.append("(?:/.*)?")
            i += 3
        elif glob.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def glob_matches(glob: str, path: str) -> bool:
    """Whether canonical ``path`` matches ``glob`` (``.`` matches ``**`` and ``.``)."""
    if path == ".":
        return glob in ("**", ".")
    return _compile(glob).fullmatch(path) is not None


@lru_cache(maxsize=64)
def matcher(globs: tuple[str, ...]) -> Callable[[str], bool]:
    """Whether a canonical path matches any of ``globs``: one alternation, one
    match per path (the verifier's copy judges every file of a repo)."""
    if not globs:
        return lambda path: False
    union = re.compile("|".join(f"(?:{_compile(g).pattern})" for g in globs), re.DOTALL)
    dot = any(g in ("**", ".") for g in globs)
    return lambda path: dot if path == "." else union.fullmatch(path) is not None


def first_match(globs: tuple[str, ...], path: str) -> str | None:
    return next((g for g in globs if glob_matches(g, path)), None)
