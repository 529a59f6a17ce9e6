"""Kept starting workspaces (``sandbox.kept``): what a run starts from, copied
read-only under the digest of its files, kept once, freed by ``sweep``."""

from __future__ import annotations

import os
import time
from pathlib import Path

from orchestrator.composition.batch.microrepo import materialise
from sandbox.kept import PARTIAL, keep, sweep, tree_digest
from sandbox.workspace import repo_entries

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "calc-mean" / "repo"


def prepared(where: Path) -> Path:
    """A task's checkout as a batch prepares it: a git repository, with an
    ignored file, a subdirectory and a link to it."""
    repo = where / "repo"
    materialise(EXAMPLE, repo)
    (repo / ".gitignore").write_text("scratch.txt\n")
    (repo / "scratch.txt").write_text("not part of the start\n")
    (repo / "pkg").mkdir()
    (repo / "pkg" / "mod.py").write_text("X = 1\n")
    (repo / "pkg-link").symlink_to("pkg")
    return repo


def test_a_kept_workspace_is_what_a_run_starts_from_read_only_and_kept_once(tmp_path):
    repo = prepared(tmp_path)
    kept = keep(repo, tmp_path / "workspaces")
    assert kept.path.name == kept.sha256 == tree_digest(repo) == tree_digest(kept.path)
    assert list(repo_entries(kept.path)) == list(repo_entries(repo))  # the same files, modes and links
    assert not (kept.path / ".git").exists() and not (kept.path / "scratch.txt").exists()
    assert (kept.path / "pkg-link").is_symlink()
    modes = {p.lstat().st_mode & 0o222 for p in (kept.path, kept.path / "pkg", kept.path / "calc.py")}
    assert modes == {0}
    assert keep(repo, tmp_path / "workspaces") == kept  # the same start again: the same copy
    assert os.listdir(tmp_path / "workspaces") == [kept.sha256]
    (repo / "calc.py").write_text("changed\n")
    assert keep(repo, tmp_path / "workspaces").sha256 != kept.sha256  # another start, kept apart


def test_sweep_frees_only_what_no_run_records_and_was_kept_before_the_cut(tmp_path):
    root = tmp_path / "workspaces"
    first = keep(prepared(tmp_path / "a"), root)
    (tmp_path / "b").mkdir()
    other = tmp_path / "b" / "repo"
    other.mkdir()
    (other / "f.py").write_text("y = 2\n")
    second = keep(other, root)
    (root / f"{PARTIAL}left").mkdir()  # a copy a killed worker left half made
    later = time.time() + 1
    assert sweep(root, {str(first.path)}, before=time.time() - 3600).workspaces == 0  # kept too recently
    counted = sweep(root, {str(first.path)}, before=later, dry_run=True)
    assert counted.workspaces == 1 and counted.bytes == len("y = 2\n") and second.path.is_dir()
    assert sweep(root, {str(first.path)}, before=later).workspaces == 1
    assert sorted(os.listdir(root)) == [first.sha256]
