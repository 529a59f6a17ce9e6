"""The host side of the workspace: snapshot the user's repo (never mounted,
only copied in as a tar), record the starting copy as a git tree in a private
git dir, and turn what comes back out of the container into a patch.

The user's checkout is only ever read, except by ``apply_patch``, which runs
only when asked.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

from orchestrator.canonical import sha256_hex
from orchestrator.contract import Frozen
from sandbox.errors import WorkspaceError

_GIT_SAFE = ["-c", "safe.directory=*", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
             "-c", "user.name=escrow", "-c", "user.email=escrow@localhost", "-c", "commit.gpgsign=false"]
# Build artefacts the sandbox's own test runs leave behind are not part of the change.
_EXCLUDES = "__pycache__/\n*.pyc\n.pytest_cache/\n"


class Patch(Frozen):
    text: str
    sha256: str
    files: tuple[str, ...]
    skipped: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.text


def _git(git_dir: Path, work_tree: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(git_dir),
           "GIT_LITERAL_PATHSPECS": "1"}
    cmd = ["git", *_GIT_SAFE, f"--git-dir={git_dir}", f"--work-tree={work_tree}", *args]
    proc = subprocess.run(cmd, capture_output=True, env=env, check=False)
    if check and proc.returncode != 0:
        raise WorkspaceError(f"git {args[0]} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc


def repo_files(repo: Path) -> list[str]:
    """Tracked and untracked-but-not-ignored files of a git repo; every file otherwise."""
    if not repo.is_dir():
        raise WorkspaceError(f"repo {repo} is not a directory", repo=str(repo))
    if (repo / ".git").exists():
        proc = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(repo), "ls-files", "-z", "-co",
                               "--exclude-standard"], capture_output=True, check=False)
        if proc.returncode == 0:
            names = {p for p in proc.stdout.decode().split("\0") if p}
            return sorted(p for p in names if (repo / p).is_symlink() or (repo / p).is_file())
    found = []
    for root, dirs, files in os.walk(repo):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        found += [os.path.relpath(os.path.join(root, f), repo) for f in files]
    return sorted(found)


def snapshot(repo: Path, state_dir: Path, max_bytes: int) -> bytes:
    """A tar of the repo's files for the container, and the starting copy
    committed in ``state_dir/base.git``."""
    files = repo_files(repo)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in files:
            info = tar.gettarinfo(str(repo / name), arcname=name)
            if not (info.isfile() or info.issym()):
                continue
            info.uid, info.gid, info.uname, info.gname = 1000, 1000, "", ""
            if info.isfile():
                with open(repo / name, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
            if buffer.tell() > max_bytes:
                raise WorkspaceError(f"repo {repo} is larger than the workspace limit ({max_bytes} bytes)")
    git_dir = state_dir / "base.git"
    _git(git_dir, repo, "init", "-q")
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info" / "exclude").write_text(_EXCLUDES)
    if files:
        # Pathspecs from a file: names with odd characters stay literal.
        (state_dir / "files.lst").write_bytes(b"\0".join(n.encode() for n in files))
        _git(git_dir, repo, "add", "-f", f"--pathspec-from-file={state_dir / 'files.lst'}", "--pathspec-file-nul")
    _git(git_dir, repo, "commit", "-q", "--allow-empty", "-m", "starting copy")
    return buffer.getvalue()


def _safe_member(member: tarfile.TarInfo, dest: str, skipped: list[str]) -> tarfile.TarInfo | None:
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        skipped.append(member.name)
        return None


def patch_from_tar(data: bytes, state_dir: Path) -> Patch:
    """Diff the workspace as exported from the container against the starting copy.
    Members that could write outside the extraction dir (absolute or escaping
    links, devices) are skipped and listed, never extracted."""
    after = state_dir / "after"
    after.mkdir()
    skipped: list[str] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        tar.extractall(after, filter=lambda m, d: _safe_member(m, d, skipped))
    git_dir = state_dir / "base.git"
    _git(git_dir, after, "add", "-A")
    text = _git(git_dir, after, "diff", "--cached", "--binary", "--no-color", "HEAD").stdout.decode(
        "utf-8", errors="surrogateescape")
    names = _git(git_dir, after, "diff", "--cached", "--name-only", "-z", "HEAD").stdout.decode()
    return Patch(text=text, sha256=sha256_hex(text.encode("utf-8", errors="surrogateescape")),
                 files=tuple(n for n in names.split("\0") if n), skipped=tuple(skipped))


def apply_patch(patch: Patch, repo: Path) -> None:
    """Apply a run's patch to the user's repo (only when asked). Checks first,
    so a patch that does not apply changes nothing."""
    if patch.empty:
        return
    data = patch.text.encode("utf-8", errors="surrogateescape")
    for args in (["apply", "--check"], ["apply"]):
        proc = subprocess.run(["git", "-c", "safe.directory=*", *args, "--whitespace=nowarn", "-"], cwd=repo,
                              input=data, capture_output=True, check=False)
        if proc.returncode != 0:
            raise WorkspaceError(
                f"patch does not apply to {repo}: {proc.stderr.decode(errors='replace').strip()}", repo=str(repo))
