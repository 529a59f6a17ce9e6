"""The run's starting copy, held in the private git dir, and what is made
from it for a fresh (verifier's) container: the verifier's copy of a patch
(``sandbox.verifier_view``), its tar stream, the starting copy's own
repository for the fresh workspace, and the refill of a verifier that
already holds the starting copy (``sandbox.refill``)."""

from __future__ import annotations

import itertools
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import resources
from typing import Protocol

from policies import Policy
from policies.paths import first_match
from sandbox.binary_text import binary_text_flags
from sandbox.capture import BytesCapture, StreamCapture
from sandbox.errors import ExportRefused, WorkspaceError
from sandbox.execution import SETUP_LIMITS, ExecLimits, ExecOutcome
from sandbox.export_stream import PAGE, text
from sandbox.git_blobs import stream_archive
from sandbox.hostgit import PrivateGit
from sandbox.refill import MANIFEST_CAP, RefillStats, parse_manifest, plan_refill, worth_listing
from sandbox.verifier_view import VerifierCopy, plan_from_git, starting_view
from sandbox.workspace import Patch, copy_bytes, starting_repo_tar, tree_entries, view_commit

_REFILL = resources.files("sandbox").joinpath("refill_script.py").read_text(encoding="utf-8")


class RefilledSandbox(Protocol):
    """What a refill needs of the verifier's sandbox (a ``Sandbox``)."""

    def exec(self, argv: list[str], limits: ExecLimits, *, stdin: bytes | Iterable[bytes] | None = None,
             stdout_capture: StreamCapture | None = None) -> ExecOutcome: ...

    def refill(self, archive: bytes | Iterable[bytes]) -> None: ...


class StartingCopy:
    """The starting copy (commit ``base`` of ``git``) of the run ``run_id``,
    whose fresh containers' workspaces take ``workspace_bytes``."""

    def __init__(self, git: PrivateGit, base: str, workspace_bytes: int, run_id: str) -> None:
        self.git = git
        self.base = base
        self.workspace_bytes = workspace_bytes
        self.run_id = run_id
        self._entries: dict[bytes, tuple[str, str]] | None = None
        self._repos: dict[int, bytes] = {}
        self._repo_lock = threading.Lock()
        self.refills: list[RefillStats] = []  # what each ``refill`` moved

    def entries(self) -> dict[bytes, tuple[str, str]]:
        if self._entries is None:  # the starting copy never changes: listed once
            self._entries = tree_entries(self.git, self.base)
        return self._entries

    def unpatched(self) -> VerifierCopy:
        """The starting copy as the verifier's copy of an empty patch."""
        starting = self.entries()
        return VerifierCopy(entries=starting, flags=(), view=starting)

    def archive_of(self, patch: Patch) -> Iterator[bytes]:
        """The starting copy with ``patch`` applied, as a tar stream for ``fresh``."""
        if not patch.tree:
            raise WorkspaceError("the patch has no recorded state to verify", run_id=self.run_id)
        return stream_archive(self.git, tree_entries(self.git, patch.tree), self.workspace_bytes,
                              self.repo(self.entries()))

    def verifier_copy(self, patch: Patch, policy: Policy, installed: Callable[[], frozenset[str]]) -> VerifierCopy:
        """What the verifier's container holds for ``patch`` under ``policy``
        (``sandbox.verifier_view``): its entries and the patch's flags."""
        if not patch.tree:
            raise WorkspaceError("the patch has no recorded state to verify", run_id=self.run_id)
        base = self.entries()
        after = tree_entries(self.git, patch.tree)
        copy = plan_from_git(self.git, base, after, policy.verify, policy.paths.deny, installed())
        binary = binary_text_flags(self.git, self.base, patch.tree, after)
        return VerifierCopy(entries=copy.entries, flags=tuple(sorted((*copy.flags, *binary), key=lambda f: f.path)),
                            view=starting_view(base, policy.verify, policy.paths.deny))

    def archive_for(self, copy: VerifierCopy) -> Iterator[bytes]:
        """``copy`` as a tar stream for ``fresh``; ExportRefused, before any
        container starts, when the copy would not fit the fresh workspace as
        it really takes it (``copy_bytes``)."""
        repo = self.repo(copy.view)
        needs = copy_bytes(self.git, copy.entries) + len(repo)
        if needs > self.workspace_bytes:
            room = self.workspace_bytes
            raise ExportRefused(f"the verifier's copy would take {needs} bytes of its {room}-byte workspace "
                                f"({len(copy.entries)} files, each whole, in {PAGE}-byte pages, with the starting "
                                "copy's .git)", needs=needs, workspace_bytes=room)
        return stream_archive(self.git, copy.entries, self.workspace_bytes, repo)

    def view_archive(self, copy: VerifierCopy) -> Iterator[bytes]:
        """The starting copy as ``copy``'s verifier may see it (its ``view``),
        with its repository: what the trusted pre-pass collects tests from."""
        return stream_archive(self.git, copy.view, self.workspace_bytes, self.repo(copy.view))

    def verifier_start(self, policy: Policy) -> Iterator[bytes]:
        """``view_archive`` of any patch's verifier copy under ``policy``
        (the view depends on the policy alone): what an early pre-pass
        collects tests from, before any patch exists."""
        view = starting_view(self.entries(), policy.verify, policy.paths.deny)
        return self.view_archive(VerifierCopy(entries=view, flags=(), view=view))

    def repo(self, view: Mapping[bytes, tuple[str, str]] | None = None) -> bytes:
        """The ``.git`` for a fresh container: one parentless commit of
        ``view`` (the starting copy as the verifier may see it; all of it
        when None), so it holds no object of a path the view leaves out.
        Made once per run and view (``workspace.starting_repo_tar``)."""
        entries = self.entries() if view is None else view
        key = hash(tuple(sorted(entries.items())))
        with self._repo_lock:  # one fixed place in the private git dir; an early verifier makes it in a thread
            if key not in self._repos:
                commit = self.base if entries == self.entries() else view_commit(self.git, entries)
                self._repos[key] = starting_repo_tar(self.git, commit)
            return self._repos[key]

    def texts(self, globs: tuple[str, ...], cap: int = 8 << 20) -> list[str]:
        """The text of the starting copy's files under ``globs`` (the hidden
        tests), up to ``cap`` bytes in all, read from the private git dir."""
        if not globs:
            return []
        texts, left = [], cap
        for path, (_mode, sha) in sorted(self.entries().items()):
            if left > 0 and first_match(globs, text(path)):
                data = self.git.run("cat-file", "blob", sha).stdout[:left]
                texts.append(data.decode("utf-8", errors="replace"))
                left -= len(data)
        return texts

    def refill(self, verifier: RefilledSandbox, copy: VerifierCopy, changed_only: bool | None = None) -> None:
        """Make ``verifier``'s workspace ``copy`` (with the starting
        ``.git``), as ``verifier.refill(self.archive_for(copy))`` does, but
        sending only what differs from what it holds (``sandbox.refill``).
        Only for a verifier that has run nothing of the model's: one that
        holds the starting copy, after the trusted pre-pass at most.
        ``changed_only`` None: only where the files are large enough on
        average for the listing to cost less than the copy (``worth_listing``)."""
        if changed_only is None:
            changed_only = worth_listing(copy_bytes(self.git, copy.entries), len(copy.entries))
            why = None if changed_only else "small files: listing them costs what copying them does"
        else:
            why = None if changed_only else "asked for"
        if why is None:
            listing = BytesCapture(MANIFEST_CAP)
            outcome = verifier.exec(["/usr/bin/python3", "-I", "-S", "-c", _REFILL, "manifest"], SETUP_LIMITS,
                                    stdout_capture=listing)
            why = ("the listing was over its cap" if listing.overflowed else
                   f"the listing failed (exit {outcome.exit_code})" if outcome.exit_code != 0 or outcome.timed_out
                   else None)
        if why is None:
            try:
                remove, send = plan_refill(parse_manifest(bytes(listing.data)), copy.entries)
            except ValueError as exc:
                why = f"the listing did not parse: {exc}"
        if why is not None:
            verifier.refill(self.archive_for(copy))
            self.refills.append(RefillStats(sent=len(copy.entries), removed=0, full=True, why_full=why))
            return
        names = b"\0".join(remove)
        tar = stream_archive(self.git, send, self.workspace_bytes, self.repo(copy.view))
        outcome = verifier.exec(["/usr/bin/python3", "-I", "-S", "-c", _REFILL, "apply"], SETUP_LIMITS,
                                stdin=itertools.chain((struct.pack(">Q", len(names)), names), tar))
        if outcome.exit_code != 0 or outcome.timed_out:
            raise WorkspaceError(f"refilling the verifier's workspace failed: {outcome.stderr.text()[:500]}",
                                 run_id=self.run_id)
        self.refills.append(RefillStats(sent=len(send), removed=len(remove), full=False))
