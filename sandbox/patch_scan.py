"""The files a patch added or changed, read from the private git dir for
``orchestrator.suspect`` (only the paths it scans, each under its cap)."""

from __future__ import annotations

from orchestrator.suspect import SCAN_MAX_BYTES, SuspectReason, flag_reasons, scan_changes, scanned, unscanned
from policies import FlagReason
from sandbox.git_blobs import BlobReader
from sandbox.hostgit import PrivateGit
from sandbox.workspace import Patch, tree_entries

_FILE_MODES = ("100644", "100755")
# Verified as the starting copy had them, whatever the patch did: not read.
_NOT_VERIFIED = frozenset({FlagReason.PROTECTED.value, FlagReason.HIDDEN.value})
TOTAL_MAX_BYTES = 64 * 1024 * 1024  # read for one submit, all files together; past it a file is ``unscanned``


class _CappedReader(BlobReader):
    def read(self, sha: str, max_bytes: int) -> tuple[int, bytes | None]:
        """The blob's size, and its bytes when they are at most ``max_bytes``
        (else read through in chunks and dropped)."""
        size = self._ask(sha)
        data = self._take(size) if size <= max_bytes else None
        left = 0 if data is not None else size
        while left:
            left -= len(self._take(min(left, 1 << 20)))
        self._take(1)
        return size, data


def suspect_reasons(git: PrivateGit | None, base: str, patch: Patch) -> tuple[SuspectReason, ...]:
    """Why ``patch``, which passed, is SUSPECT: what it added to the files
    ``orchestrator.suspect`` reads (those the verifier ran: a protected or
    hidden path is verified as it was), and what the verifier's copy left out."""
    left_out = flag_reasons(patch.flagged)
    kept = {f.path for f in patch.flagged if f.reason in _NOT_VERIFIED}
    if git is None or not patch.tree:
        return left_out
    before, after = tree_entries(git, base), tree_entries(git, patch.tree)
    changed = sorted(p for p, (mode, sha) in after.items()
                     if mode in _FILE_MODES and before.get(p) != (mode, sha)
                     and scanned(name := p.decode("utf-8", "surrogateescape")) and name not in kept)
    changes: dict[str, tuple[bytes | None, bytes | None]] = {}
    over: list[SuspectReason] = []
    budget = TOTAL_MAX_BYTES
    reader = _CappedReader(git)
    try:
        for raw in changed:
            path = raw.decode("utf-8", "surrogateescape")
            cap = min(SCAN_MAX_BYTES, budget)
            size, new = reader.read(after[raw][1], cap)
            if new is None:
                over.append(unscanned(path, size, cap))
                continue
            budget -= size
            old = None
            if raw in before and before[raw][0] in _FILE_MODES:
                _, old = reader.read(before[raw][1], SCAN_MAX_BYTES)
            changes[path] = (old, new)
    finally:
        reader.close()
    return (*scan_changes(changes), *over, *left_out)
