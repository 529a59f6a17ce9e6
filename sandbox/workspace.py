"""The host side of the workspace: snapshot the user's repo (never mounted,
only copied in as a tar), record the starting copy as a commit in a private
git dir, turn what the container exports into a patch, and apply a patch.

The user's checkout is only ever read, except by ``apply_patch``, which runs
only when asked. Git never runs with the user's repo as its repository except
for ``ls-files`` (config that runs programs overridden, no system/global
config); the starting copy and every diff live in a private bare repo fed
with data, so nothing in the repo or the sandbox steers host git.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from orchestrator.canonical import RecordedBytesError, bytes_fields, recorded_bytes, sha256_hex
from orchestrator.contract import Frozen
from policies import Flag, FlagReason
from policies.model import CI_CONFIG_GLOBS
from policies.paths import first_match
from sandbox.errors import ApplyRefused, WorkspaceError
from sandbox.export_stream import (
    EXEC,
    FILE,
    LINK,
    ExportLimits,
    ExportParser,
    Skipped,
    TreeBuilder,
    copy_cost,
    is_build_artefact,
    is_git_metadata,
    text,
)
from sandbox.hostgit import PrivateGit, run_git

BASE_REF = "refs/heads/base"
class Patch(Frozen):
    """A run's change to the starting copy: git's diff and what is known of
    its paths. ``text`` is git's output decoded with ``surrogateescape``
    (every byte that is not UTF-8 kept as a lone surrogate), so ``data``
    gives back exactly the bytes ``sha256`` is of; paths are decoded alike."""

    text: str
    sha256: str
    files: tuple[str, ...]
    skipped: tuple[Skipped, ...] = ()
    flagged: tuple[Flag, ...] = ()
    tree: str = ""  # the private commit of the after-state (what the verifier runs on)

    @property
    def empty(self) -> bool:
        return not self.text

    @property
    def data(self) -> bytes:
        """The patch's exact bytes (what ``git apply`` reads)."""
        return self.text.encode("utf-8", errors="surrogateescape")

    @classmethod
    def none(cls) -> "Patch":
        return cls(text="", sha256=sha256_hex(b""), files=())

    def record(self) -> dict[str, object]:
        """What the store keeps of it: the bytes as ``bytes_fields`` keeps them
        exact (``text``, with ``base64`` when they are not UTF-8); paths as
        decoded, which canonical JSON keeps exact too."""
        return {"sha256": self.sha256, "files": list(self.files), **bytes_fields(self.data),
                "skipped": [s.model_dump() for s in self.skipped], "flagged": [f.model_dump() for f in self.flagged]}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "Patch":
        """The patch ``record`` kept, read through ``recorded_bytes``; its bytes
        must hash to the recorded sha256. (An older record lists flagged paths
        as plain strings, whose reasons come from the path alone:
        ``apply_patch`` reads those again from the patch itself.)"""
        data = recorded_bytes(record)
        if sha256_hex(data) != record.get("sha256"):
            raise RecordedBytesError(f"the recorded patch does not hash to its recorded sha256 {record.get('sha256')}")
        return cls(text=text(data), sha256=sha256_hex(data), files=tuple(record.get("files") or ()),
                   skipped=tuple(Skipped.model_validate(s) for s in record.get("skipped") or ()),
                   flagged=tuple(Flag.model_validate(f) for f in record.get("flagged") or () if isinstance(f, dict)))


def flag_reason(path: str) -> FlagReason | None:
    """Why a patched path needs an explicit grant to be applied, whatever the
    policy, or None. (Protected, hidden and shadowing paths depend on the
    policy and the image: ``sandbox.verifier_view`` flags those.)"""
    if path.startswith("/") or ".." in path.split("/") or "\0" in path:
        return FlagReason.OUTSIDE_REPO
    if is_git_metadata(path.encode("utf-8", errors="surrogateescape")):
        return FlagReason.GIT_METADATA
    if first_match(CI_CONFIG_GLOBS, path):
        return FlagReason.CI_CONFIG
    return None


def repo_files(repo: Path) -> list[str]:
    """Tracked and untracked-but-not-ignored files of a git repo; every file
    otherwise (also when git refuses a repo someone else owns)."""
    if not repo.is_dir():
        raise WorkspaceError(f"repo {repo} is not a directory", repo=str(repo))
    if (repo / ".git").exists():
        with tempfile.TemporaryDirectory(prefix="escrow-home-") as home:
            proc = run_git(["ls-files", "-z", "-co", "--exclude-standard"], home=Path(home), cwd=repo, check=False,
                           env={"GIT_CEILING_DIRECTORIES": str(repo.parent)})
        if proc.returncode == 0:
            names = {p for p in proc.stdout.decode("utf-8", errors="surrogateescape").split("\0") if p}
            return sorted(p for p in names if (repo / p).is_symlink() or (repo / p).is_file())
    found = []
    for root, dirs, files in os.walk(repo):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        # A symlink to a directory is listed as a link, as git lists it (a
        # kept workspace, which has no .git, then starts a run as its source did).
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        found += [os.path.relpath(os.path.join(root, f), repo) for f in (*files, *links)]
    return sorted(found)


def _read_nofollow(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise WorkspaceError(f"{path} is not a regular file")
        return fh.read()


def tar_info(name: str, mode: str, data: bytes) -> tarfile.TarInfo:
    """The tar header every copy into a container uses: the sandbox user's,
    mtime 0, 0644/0755 from the git mode, a link's target from its blob."""
    info = tarfile.TarInfo(name)
    info.uid, info.gid, info.mtime = 1000, 1000, 0
    if mode == LINK:
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, text(data), 0o777
    else:
        info.size, info.mode = len(data), 0o755 if mode == EXEC else 0o644
    return info


def _tar_member(name: str, mode: str, data: bytes) -> tuple[tarfile.TarInfo, io.BytesIO | None]:
    return tar_info(name, mode, data), None if mode == LINK else io.BytesIO(data)


def repo_entries(repo: Path) -> Iterator[tuple[str, str, bytes]]:
    """(path, git mode, bytes) of what a run starts from: the repo's regular
    files and symlinks (a link's bytes are its target), read with O_NOFOLLOW;
    git metadata and paths reached through a symlinked directory left out.
    The snapshot and a kept workspace's digest both read the repo through it."""
    real_repo = Path(os.path.realpath(repo))
    for name in repo_files(repo):
        raw = name.encode("utf-8", errors="surrogateescape")
        if is_git_metadata(raw) or Path(os.path.realpath((repo / name).parent)) != real_repo / Path(name).parent:
            continue
        st = os.lstat(repo / name)
        if stat.S_ISLNK(st.st_mode):
            yield name, LINK, os.fsencode(os.readlink(repo / name))
        elif stat.S_ISREG(st.st_mode):
            yield name, (EXEC if st.st_mode & 0o111 else FILE), _read_nofollow(repo / name)


def snapshot(repo: Path, git: PrivateGit, max_bytes: int, hidden: tuple[str, ...] = ()) -> tuple[bytes, str]:
    """A tar of the repo's regular files and symlinks for the container, and the
    same content committed as the starting copy in ``git`` (read here with
    O_NOFOLLOW, never through git's attributes or filters). Paths under a
    ``hidden`` glob are committed but left out of the tar: the model never
    sees them, the verifier gets them from the starting copy."""
    tree = TreeBuilder(git)
    buffer = io.BytesIO()
    try:
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, mode, data in repo_entries(repo):
                if not first_match(hidden, name):
                    tar.addfile(*_tar_member(name, mode, data))
                tree.put(name.encode("utf-8", errors="surrogateescape"), mode, tree.blob(data))
                if buffer.tell() > max_bytes:
                    raise WorkspaceError(f"repo {repo} is larger than the workspace limit ({max_bytes} bytes)")
        base = tree.commit(BASE_REF)
    finally:
        tree.abort()
    return buffer.getvalue(), base


def view_commit(git: PrivateGit, entries: Mapping[bytes, tuple[str, str]],
                ref: str = "refs/heads/verifier-view") -> str:
    """A parentless commit of ``entries`` (their blobs already in ``git``):
    the verifier's history, with nothing of what the entries leave out."""
    tree = TreeBuilder(git)
    try:
        for path, (mode, sha) in entries.items():
            tree.put(path, mode, sha)
        return tree.commit(ref)
    finally:
        tree.abort()


def starting_repo_tar(git: PrivateGit, base: str) -> bytes:
    """Tar members (without the end-of-archive blocks) of a ``.git`` whose
    HEAD is ``base`` (the starting copy as the verifier may see it:
    ``view_commit``): one pack of the objects reachable from it, nothing
    else, and an index.
    Made once per run on the host, so that a verifier's container gets its
    repository by extraction alone instead of hashing every file again."""
    target = git.root / "starting-repo.git"
    shutil.rmtree(target, ignore_errors=True)
    git.run("init", "-q", "--bare", "--template=", str(target), git_dir=False)
    pack = git.run("pack-objects", "--revs", "--stdout", "-q", input=f"{base}\n".encode()).stdout
    env = {"GIT_DIR": str(target)}
    for args, given in ((["index-pack", "--stdin"], pack), (["config", "core.bare", "false"], None),
                        (["update-ref", "refs/heads/main", base], None),
                        (["symbolic-ref", "HEAD", "refs/heads/main"], None), (["read-tree", base], None)):
        run_git(args, home=git.home, cwd=git.home, input=given, env=env, timeout_s=git.timeout_s)
    members = []
    for path in sorted(p for p in target.rglob("*") if p.is_file()):
        data = path.read_bytes()
        members += [tar_info(f".git/{path.relative_to(target)}", FILE, data).tobuf(tarfile.PAX_FORMAT), data,
                    b"\0" * (-len(data) % tarfile.BLOCKSIZE)]
    shutil.rmtree(target, ignore_errors=True)
    return b"".join(members)


def tree_entries(git: PrivateGit, commit: str) -> dict[bytes, tuple[str, str]]:
    """path -> (mode, object sha) of every file in ``commit``."""
    out = git.run("ls-tree", "-r", "-z", "--full-tree", commit).stdout
    entries = {}
    for line in out.split(b"\0"):
        if line:
            meta, _, path = line.partition(b"\t")
            mode, _kind, sha = meta.split(b" ")
            entries[path] = (mode.decode(), sha.decode())
    return entries


def copy_bytes(git: PrivateGit, entries: Mapping[bytes, tuple[str, str]]) -> int:
    """What ``entries`` take on a tmpfs: every file whole (a blob shared by
    many paths, as hard links were, counts at each), in whole pages."""
    shas = sorted({sha for _, sha in entries.values()})
    if not shas:
        return 0
    out = git.run("cat-file", "--batch-check=%(objectname) %(objectsize)", input="\n".join(shas).encode()).stdout
    sizes = dict(line.split(b" ") for line in out.splitlines())
    return sum(copy_cost(int(sizes[sha.encode()])) for _, sha in entries.values())


def commit_export(parser: ExportParser, git: PrivateGit, base: str, ref: str, hidden: tuple[str, ...] = ()) -> str:
    """The after-state as a commit: what the export carried, plus the starting
    copy's entry for every path it skipped (a skipped path is unchanged, never
    deleted), for build artefacts (never exported) and for hidden paths (never
    in the model's copy, so not deleted by it)."""
    parser.finish()
    tree = parser.tree
    skipped = {s.path.encode("utf-8", errors="surrogateescape") for s in parser.skipped}

    def under_skipped(path: bytes) -> bool:  # the path, or a directory above it (unreadable, too deep)
        parts = path.split(b"/")
        return any(b"/".join(parts[:n]) in skipped for n in range(1, len(parts) + 1))

    for path, (mode, sha) in tree_entries(git, base).items():
        if path not in tree.entries and (is_build_artefact(path) or under_skipped(path)
                                         or first_match(hidden, text(path))):
            tree.put(path, mode, sha)
    return tree.commit(ref)


def diff_patch(git: PrivateGit, base: str, after: str, skipped: tuple[Skipped, ...], limits: ExportLimits) -> Patch:
    """The patch from ``base`` to ``after``, hashed and flagged."""
    data = git.diff(base, after, limits.max_patch_bytes, "--binary", "--full-index")
    names = git.diff(base, after, limits.max_patch_bytes, "--name-only", "-z").decode("utf-8", errors="surrogateescape")
    files = tuple(n for n in names.split("\0") if n)
    return Patch(text=data.decode("utf-8", errors="surrogateescape"), sha256=sha256_hex(data), files=files,
                 skipped=skipped, tree=after,
                 flagged=tuple(Flag(path=f, reason=r.value) for f in files if (r := flag_reason(f))))


def patch_paths(patch: bytes | str) -> tuple[str, ...]:
    """Every path a patch would touch, as git apply itself reads it (a str
    patch is taken as ``Patch.text`` is: decoded with ``surrogateescape``)."""
    data = patch.encode("utf-8", errors="surrogateescape") if isinstance(patch, str) else patch
    with tempfile.TemporaryDirectory(prefix="escrow-apply-") as tmp:
        git = PrivateGit(Path(tmp)).init()
        out = git.run("apply", "--numstat", "-z", "-", input=data).stdout
    paths: list[str] = []
    fields = out.decode("utf-8", errors="surrogateescape").split("\0")
    i = 0
    while i < len(fields):
        if not fields[i]:
            i += 1
            continue
        added, removed, name = fields[i].split("\t", 2)
        if name:  # a plain path
            paths.append(name)
            i += 1
        else:  # a rename: the two paths follow
            paths += fields[i + 1 : i + 3]
            i += 3
    return tuple(paths)


def apply_patch(patch: Patch, repo: Path, *, expected_sha256: str | None = None,
                allow: frozenset[FlagReason] = frozenset()) -> None:
    """Apply a run's patch to the user's repo (only when asked): the text must
    hash to ``expected_sha256`` (the verdict's), every flagged path needs its
    reason in ``allow`` ("git metadata", "CI configuration", "outside the
    repo"), and it is checked before anything is written. git runs with a
    private git dir, so the repo's config, hooks and attributes are not read."""
    data = patch.data
    if expected_sha256 is not None and sha256_hex(data) != expected_sha256:
        raise ApplyRefused(f"the patch does not hash to the verified {expected_sha256}; nothing was written",
                           repo=str(repo))
    if patch.empty:
        return
    # Path-only reasons are read again from the text itself; the policy's
    # (protected, hidden, shadowing) come with the patch from its verification.
    flagged = sorted({(p, r.value) for p in patch_paths(data) if (r := flag_reason(p)) and r not in allow}
                     | {(f.path, f.reason) for f in patch.flagged if f.reason not in allow})
    if flagged:
        listed = ", ".join(f"{p} ({r})" for p, r in flagged[:10])
        raise ApplyRefused(f"the patch touches paths the policy does not allow to apply: {listed}; nothing was "
                           "written (grant them in the policy's [apply] section)", repo=str(repo))
    with tempfile.TemporaryDirectory(prefix="escrow-apply-") as tmp:
        git = PrivateGit(Path(tmp)).init()
        for args in (["apply", "--check"], ["apply"]):
            proc = run_git([*args, "--whitespace=nowarn", "-"], home=git.home, cwd=repo, input=data, check=False,
                           env={"GIT_DIR": str(git.git_dir)}, timeout_s=git.timeout_s)
            if proc.returncode != 0:
                raise WorkspaceError(
                    f"patch does not apply to {repo}: {proc.stderr.decode(errors='replace').strip()}", repo=str(repo))
