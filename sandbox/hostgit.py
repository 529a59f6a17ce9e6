"""Git on the host, isolated from everything a repo or the model controls.

Every call gets: no system or global config, ``HOME`` an empty private
directory, no system attributes, hooks, fsmonitor and attribute files off, no
replace objects, literal pathspecs, and a timeout. Never ``safe.directory``:
a repo someone else owns is refused by git's own guard.

``PrivateGit`` is a bare git dir that escrow made itself: sandbox content
enters it only as blob data (``fast-import``), never as files in a work tree,
so a ``.git`` file, a ``.gitattributes`` or a nested repository written by the
model is just data.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from sandbox.errors import ExportRefused, GitTimeout, WorkspaceError

GIT_TIMEOUT_S = 120.0
_ISOLATION = ["-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.attributesFile=/dev/null",
              "-c", "core.untrackedCache=false", "-c", "diff.external=", "-c", "core.pager=cat",
              "-c", "user.name=escrow", "-c", "user.email=escrow@localhost", "-c", "commit.gpgsign=false"]


def isolated_env(home: Path, **extra: str) -> dict[str, str]:
    """The whole environment of a host git call: nothing inherited but PATH."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "XDG_CONFIG_HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
            "GIT_NO_REPLACE_OBJECTS": "1", "GIT_LITERAL_PATHSPECS": "1", "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C", **extra}


def run_git(args: Iterable[str], *, home: Path, cwd: Path, input: bytes | None = None,
            timeout_s: float = GIT_TIMEOUT_S, env: dict[str, str] | None = None,
            check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """One isolated git call; a timeout or (with ``check``) a failure is a WorkspaceError."""
    argv = ["git", *_ISOLATION, *args]
    try:
        proc = subprocess.run(argv, cwd=cwd, input=input, capture_output=True, timeout=timeout_s, check=False,
                              env=isolated_env(home, **(env or {})))
    except subprocess.TimeoutExpired as exc:
        raise GitTimeout(f"git {argv[len(_ISOLATION) + 1]} ran past {timeout_s:g}s and was killed",
                         timeout_s=timeout_s) from exc
    if check and proc.returncode != 0:
        raise WorkspaceError(f"git {' '.join(args)[:80]} failed: {proc.stderr.decode(errors='replace').strip()[:500]}",
                             exit_status=proc.returncode)
    return proc


class PrivateGit:
    """A bare repository under ``root`` that only escrow writes to."""

    def __init__(self, root: Path, timeout_s: float = GIT_TIMEOUT_S) -> None:
        self.root = root
        self.git_dir = root / "private.git"
        self.home = root / "home"
        self.timeout_s = timeout_s

    def init(self) -> "PrivateGit":
        self.home.mkdir(parents=True, exist_ok=True)
        self.run("init", "-q", "--bare", str(self.git_dir), git_dir=False)
        return self

    def run(self, *args: str, input: bytes | None = None, git_dir: bool = True,
            check: bool = True) -> subprocess.CompletedProcess[bytes]:
        env = {"GIT_DIR": str(self.git_dir)} if git_dir else {"GIT_CEILING_DIRECTORIES": str(self.root)}
        return run_git(args, home=self.home, cwd=self.home, input=input, timeout_s=self.timeout_s, env=env,
                       check=check)

    def fast_import(self, stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        """A ``git fast-import`` reading a stream on stdin (the caller writes
        and waits), its errors written to ``stderr`` (a file the caller reads
        when it failed: a pipe nobody drains could stall it)."""
        argv = ["git", *_ISOLATION, "fast-import", "--quiet", "--done"]
        return subprocess.Popen(argv, cwd=self.home, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=stderr, env=isolated_env(self.home, GIT_DIR=str(self.git_dir)))

    def cat_file_batch(self) -> subprocess.Popen[bytes]:
        """A ``git cat-file --batch`` answering one object per line written
        (the caller reads, kills and waits)."""
        argv = ["git", *_ISOLATION, "cat-file", "--batch"]
        return subprocess.Popen(argv, cwd=self.home, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=isolated_env(self.home, GIT_DIR=str(self.git_dir)))

    def diff(self, base: str, after: str, max_bytes: int, *args: str) -> bytes:
        """``git diff base after`` (trees; no work tree, no attributes, no drivers),
        read with a byte cap: past it git is killed and WorkspaceError raised."""
        argv = ["git", *_ISOLATION, "diff", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames",
                *args, base, after, "--"]
        with tempfile.TemporaryFile() as err, subprocess.Popen(
                argv, cwd=self.home, stdout=subprocess.PIPE, stderr=err,
                env=isolated_env(self.home, GIT_DIR=str(self.git_dir))) as proc:
            assert proc.stdout is not None
            try:
                data = _read_capped(proc, max_bytes, self.timeout_s)
            finally:
                proc.kill()
            code = proc.wait()
            if code != 0 and code != -9:
                err.seek(0)
                raise WorkspaceError(f"git diff failed: {err.read().decode(errors='replace')[:500]}")
        return data


def _read_capped(proc: subprocess.Popen[bytes], max_bytes: int, timeout_s: float) -> bytes:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    total = 0
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise GitTimeout(f"git diff ran past {timeout_s:g}s and was killed", timeout_s=timeout_s)
            if not sel.select(min(left, 1.0)):
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > max_bytes:
                raise ExportRefused(f"the patch is larger than the cap ({max_bytes} bytes)", max_bytes=max_bytes)
            chunks.append(chunk)

