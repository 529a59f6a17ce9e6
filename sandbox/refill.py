"""A verifier's refill with only what changed (issue 46, point 3): the
container started early already holds the starting copy, so a submit
sends only the files whose content, kind or mode differ from what is there,
after removing what the copy does not hold; the result is what a full copy
(``Sandbox.refill``: empty the workspace, extract all) leaves.

What is there is listed by ``sandbox/refill_script.py`` in the verifier's
container (git blob id, kind, mode, owner, links, mtime of each entry)
before anything of the model's is in it: only the starting copy and the
trusted pre-pass have been there. An entry is kept only when it is exactly
what the full copy's tar would make (the copy's blob, 0644/0755 under the
umask, the sandbox user's, one link, mtime 0; a directory some kept path
needs); anything else, a pre-pass's ``__pycache__`` included, is removed.
``.git`` is always sent whole (one pack). A listing that is malformed or
over its cap leaves the decision to the full copy.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.contract import Frozen
from sandbox.export_stream import EXEC, FILE, LINK

Entries = Mapping[bytes, tuple[str, str]]
MANIFEST_CAP = 64 << 20
# Listing (hashing) a file in the verifier costs about what copying it in
# does, per file; per byte, hashing is ~10x cheaper than the copy's stream
# (bench_runtime's large rows, runsc on a 2-core box: 5,000 files of 200
# bytes listed 2.4 s against a 1.8 s whole copy; 400 of 180 KB, 0.7 s
# against 2.8 s; break-even near 4 KB a file). Only what changed is sent
# where the copy's files average at least this much.
WORTH_LISTING_MEAN_BYTES = 8 << 10


class Listed(Frozen):
    """One entry of the verifier's workspace as the manifest gives it."""

    kind: str  # f, l, d, o (``refill_script``)
    perm: int
    uid: int
    gid: int
    nlink: int
    mtime: int
    sha: str


class Manifest(Frozen):
    umask: int
    uid: int
    gid: int
    entries: dict[bytes, Listed]


class RefillStats(Frozen):
    """What one refill of a verifier's container moved: the count a test
    asserts (causality, not time)."""

    sent: int  # files and links extracted
    removed: int  # paths removed first (each whole)
    full: bool  # the whole copy, as without this module
    why_full: str | None = None


def worth_listing(copy_bytes: int, files: int) -> bool:
    """Whether to send only what changed, by the copy's mean file size."""
    return files > 0 and copy_bytes >= WORTH_LISTING_MEAN_BYTES * files


def parse_manifest(data: bytes) -> Manifest:
    """``refill_script manifest``'s output; ValueError on anything else."""
    fields = data.split(b"\0")
    if len(fields) < 3 or fields[-1] != b"" or len(fields) % 2 != 1:
        raise ValueError("the manifest is not whole records")
    head: Listed | None = None
    entries: dict[bytes, Listed] = {}
    for meta, path in zip(fields[0:-1:2], fields[1::2], strict=True):
        parts = meta.split(b" ")
        if len(parts) != 7 or parts[0] not in (b"u", b"f", b"l", b"d", b"o"):
            raise ValueError(f"a malformed manifest record: {meta[:80]!r}")
        listed = Listed(kind=parts[0].decode(), perm=int(parts[1], 8), uid=int(parts[2]), gid=int(parts[3]),
                        nlink=int(parts[4]), mtime=int(parts[5]), sha=parts[6].decode("ascii"))
        if head is None:
            if listed.kind != "u":
                raise ValueError("the manifest does not start with its umask")
            head = listed
            continue
        if listed.kind == "u" or not _relative(path) or path in entries:
            raise ValueError(f"a malformed manifest path: {path[:80]!r}")
        entries[path] = listed
    if head is None:
        raise ValueError("an empty manifest")
    return Manifest(umask=head.perm, uid=head.uid, gid=head.gid, entries=entries)


def _relative(path: bytes) -> bool:
    return bool(path) and not path.startswith(b"/") and all(p not in (b"", b".", b"..") for p in path.split(b"/"))


def plan_refill(manifest: Manifest, wanted: Entries) -> tuple[list[bytes], dict[bytes, tuple[str, str]]]:
    """(paths to remove, each whole and none under another; entries to
    send) that turn what ``manifest`` lists into exactly ``wanted``."""
    dirs = {path[:i] for path in wanted for i in range(len(path)) if path[i:i + 1] == b"/"}
    perms = {FILE: 0o644 & ~manifest.umask, EXEC: 0o755 & ~manifest.umask}
    bad = set()
    for path, e in manifest.entries.items():
        owned = e.uid == manifest.uid and e.gid == manifest.gid
        want = wanted.get(path)
        if e.kind == "d":
            keep = owned and path in dirs
        elif e.kind == "f":
            keep = (want is not None and want[0] in perms and e.sha == want[1] and e.perm == perms[want[0]]
                    and owned and e.nlink == 1 and e.mtime == 0)
        elif e.kind == "l":
            keep = want is not None and want[0] == LINK and e.sha == want[1] and owned
        else:
            keep = False
        if not keep:
            bad.add(path)

    def under_bad(path: bytes) -> bool:
        return any(path[:i] in bad for i in range(len(path)) if path[i:i + 1] == b"/")

    remove = sorted(p for p in bad if not under_bad(p))
    kept = {p for p, e in manifest.entries.items() if e.kind in ("f", "l") and p not in bad and not under_bad(p)}
    return remove, {p: w for p, w in wanted.items() if p not in kept}
