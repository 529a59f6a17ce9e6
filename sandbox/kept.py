"""Kept starting workspaces: a batch attempt's repository as it was prepared,
kept read-only under a content address (``ROOT/<tree sha256>``) so that its
run can be re-executed and forked after the batch's scratch copy is gone.
Identical starting repositories are kept once.

The digest is over what a sandbox copies in (``workspace.repo_entries``):
each file's path, git mode and content, so a replay can tell that a kept
workspace still is what its run started from. ``sweep`` frees the ones no
run records (``escrow gc``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

from orchestrator.contract import Frozen
from sandbox.export_stream import EXEC, LINK
from sandbox.workspace import repo_entries

KEPT_NAME = re.compile(r"^[0-9a-f]{64}$")
PARTIAL = ".partial-"  # a copy in progress (or one a killed process left)


class Kept(Frozen):
    """Where a starting workspace is kept, and the digest it was kept under."""

    path: Path
    sha256: str


class Freed(Frozen):
    workspaces: int = 0
    bytes: int = 0


def tree_digest(repo: Path) -> str:
    """sha256 of the repo's files as a run starts from them (path, mode, content)."""
    digest = hashlib.sha256()
    for name, mode, data in sorted(repo_entries(repo)):
        digest.update(b"%s %s %s\0" % (mode.encode(), hashlib.sha256(data).hexdigest().encode(),
                                       name.encode("utf-8", errors="surrogateescape")))
    return digest.hexdigest()


def keep(repo: Path, root: Path) -> Kept:
    """``repo``'s files copied read-only to ``root/<digest>`` (no ``.git``),
    or the copy already there; either way marked as kept now."""
    sha = tree_digest(repo)
    root = root.resolve()
    dest = root / sha
    if not dest.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=PARTIAL, dir=root))
        try:
            _write(repo, partial)
            os.rename(partial, dest)  # atomic: a kept workspace is whole or absent
        except OSError:
            _remove(partial)
            if not dest.is_dir():  # not another worker's copy of the same repo: a real failure
                raise
    os.utime(dest)
    return Kept(path=dest, sha256=sha)


def _write(repo: Path, into: Path) -> None:
    for name, mode, data in repo_entries(repo):
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if mode == LINK:
            os.symlink(os.fsdecode(data), target)
        else:
            target.write_bytes(data)
            target.chmod(0o555 if mode == EXEC else 0o444)
    for folder, _dirs, _files in os.walk(into, topdown=False):
        os.chmod(folder, 0o555)


def sweep(root: Path, recorded: set[str], *, before: float, dry_run: bool = False) -> Freed:
    """Free the kept workspaces under ``root`` whose path no run records
    (``recorded``: the runs' repo paths) and that were last kept before
    ``before`` (a batch keeps its workspace before it records the run);
    also copies a killed process left half made."""
    if not root.is_dir():
        return Freed()
    root = root.resolve()
    count = size = 0
    for entry in sorted(root.iterdir()):
        kept = KEPT_NAME.match(entry.name) is not None
        if not (kept or entry.name.startswith(PARTIAL)) or entry.is_symlink() or not entry.is_dir():
            continue
        if (kept and str(entry) in recorded) or entry.stat().st_mtime >= before:
            continue
        count += kept
        size += _size(entry)
        if not dry_run:
            _remove(entry)
    return Freed(workspaces=count, bytes=size)


def _size(folder: Path) -> int:
    return sum(os.lstat(os.path.join(base, name)).st_size
               for base, _dirs, files in os.walk(folder) for name in files)


def _remove(folder: Path) -> None:
    """rmtree of a read-only tree: each directory made writable first."""
    if not folder.exists():
        return
    for base, _dirs, _files in os.walk(folder):
        os.chmod(base, stat.S_IRWXU)
    shutil.rmtree(folder)

