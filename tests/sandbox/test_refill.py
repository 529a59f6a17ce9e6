"""Only what changed is copied into a verifier that holds the starting copy
(``sandbox.refill``, ``StartingCopy.refill``): counted by what the refill
records, and the verifier's workspace left as a full copy leaves it."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies import default_policy
from sandbox import ToolBox
from sandbox.refill import Listed, Manifest, parse_manifest, plan_refill

pytestmark = [pytest.mark.docker]

# Every entry but .git, with kind, mode, links, size and a link's target.
LISTING = "find . -path ./.git -prune -o -printf '%y %m %n %s %p %l\\n' | LC_ALL=C sort"


def test_a_large_repository_with_one_changed_file_sends_one_file(start_sandbox, tmp_path):
    repo = tmp_path / "big"
    for n in range(400):  # 10 KB each: large enough that the default lists them (refill.worth_listing)
        (repo / f"pkg{n % 20}").mkdir(parents=True, exist_ok=True)
        (repo / f"pkg{n % 20}" / f"m{n}.txt").write_text(f"file {n}\n".ljust(10 << 10, "."))
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "test_calc.py").write_text("import os\nfrom calc import add\n\n\ndef test_add():\n"
                                       "    assert add(2, 3) == 5\n"
                                       "    assert not os.path.exists('pre-pass-was-here')\n")
    # The trusted pre-pass (the starting copy's tests, collected) leaves a
    # file; a full copy empties the workspace, so must this one.
    (repo / "conftest.py").write_text("import os\n\n\ndef pytest_collection_finish(session):\n"
                                      "    if os.environ.get('ESCROW_EVIDENCE_MODE') == 'collect':\n"
                                      "        open('pre-pass-was-here', 'w').close()\n")
    sandbox = start_sandbox(repo)
    box = ToolBox(sandbox, default_policy(), verifier_command="python3 -m pytest -q -p no:cacheprovider")
    box.start_early()
    assert box.command("bash", "sed -i 's/a - b/a + b/' calc.py", None).ok
    result = box.submit()
    assert result.verifier_passed, result.observation
    assert result.evidence is not None and result.evidence.source == "collected"
    [stats] = sandbox.starting.refills
    assert (stats.full, stats.sent) == (False, 1) and stats.removed >= 1


def test_deletions_kinds_and_links_end_as_in_a_full_copy(start_sandbox, tmp_path):
    repo = tmp_path / "kinds"
    (repo / "dir_to_file").mkdir(parents=True)
    (repo / "dir_to_link").mkdir()
    for name in ("gone.txt", "file_to_dir", "plain.txt", "target.txt", "dir_to_file/x.txt", "dir_to_link/y.txt",
                 "run.sh", "kept.txt"):
        (repo / name).write_text(f"{name}\n")
    (repo / "old_link").symlink_to("target.txt")
    (repo / "gone_link").symlink_to("kept.txt")
    sandbox = start_sandbox(repo)
    changes = ("rm gone.txt && rm file_to_dir && mkdir file_to_dir && echo in > file_to_dir/inner.txt"
               " && rm -r dir_to_file && echo now-a-file > dir_to_file"
               " && rm -r dir_to_link && ln -s /etc dir_to_link"
               " && rm plain.txt && ln -s target.txt plain.txt && ln -sfn kept.txt old_link"
               " && rm gone_link && ln target.txt hard.txt && chmod +x run.sh")
    listings, stats = [], []
    for changed_only in (True, False):
        box = ToolBox(sandbox, default_policy(), verifier_command=LISTING)
        box.copy_changed_only = changed_only
        box.start_early()
        if changed_only:
            assert box.command("bash", changes, None).ok
        result = box.submit()
        assert result.verifier_passed and result.stdout is not None, result.observation
        listings.append(result.stdout.text())
        stats.append(sandbox.starting.refills[-1])
    changed, full = listings
    assert changed == full
    # What the verifier's copy holds is sandbox.verifier_view's to decide (a
    # link, a kind the starting copy does not hold at a path, a link out of
    # the repo: the starting version); both refills make exactly that.
    assert [(s.full, s.sent, s.removed) for s in stats] == [(False, 3, 5), (True, 8, 0)]
    assert "gone.txt" not in changed and "gone_link" not in changed and "./dir_to_file" not in changed
    assert "f 644 1 3 ./file_to_dir/inner.txt" in changed and "l 777 1 10 ./old_link target.txt" in changed
    assert "f 644 1 11 ./hard.txt" in changed and "f 755 1 7 ./run.sh" in changed
    assert "f 644 1 18 ./dir_to_link/y.txt" in changed


def listed(kind: str, sha: str = "-", perm: int = 0o644, **kw) -> Listed:
    return Listed(kind=kind, perm=perm, uid=kw.get("uid", 1000), gid=1000, nlink=kw.get("nlink", 1),
                  mtime=kw.get("mtime", 0), sha=sha)


def test_the_plan_keeps_only_entries_exactly_as_the_full_copy_makes_them():
    wanted = {b"a/b.txt": ("100644", "1" * 40), b"run": ("100755", "2" * 40), b"l": ("120000", "3" * 40),
              b"same.txt": ("100644", "4" * 40)}
    manifest = Manifest(umask=0o022, uid=1000, gid=1000, entries={
        b"a": listed("d", perm=0o755), b"a/b.txt": listed("f", "1" * 40, nlink=2),  # a hard link: sent again
        b"run": listed("f", "2" * 40, perm=0o644),  # the exec bit differs
        b"l": listed("f", "3" * 40),  # a file where a link goes
        b"same.txt": listed("f", "4" * 40),
        b"__pycache__": listed("d", perm=0o755), b"__pycache__/x.pyc": listed("f", "5" * 40),
        b"old.txt": listed("f", "6" * 40, mtime=7), b"fifo": listed("o"),
    })
    remove, send = plan_refill(manifest, wanted)
    assert remove == [b"__pycache__", b"a/b.txt", b"fifo", b"l", b"old.txt", b"run"]
    assert sorted(send) == [b"a/b.txt", b"l", b"run"]
    touched = manifest.model_copy(update={"entries": manifest.entries | {b"same.txt": listed("f", "4" * 40, mtime=5)}})
    assert b"same.txt" in plan_refill(touched, wanted)[1], "a file touched since the copy is sent again"
    foreign = manifest.model_copy(update={"entries": manifest.entries | {b"a": listed("d", perm=0o755, uid=0)}})
    remove, send = plan_refill(foreign, wanted)
    assert b"a" in remove and b"a/b.txt" not in remove, "a directory not the sandbox user's is removed whole"
    assert b"a/b.txt" in send


@pytest.mark.parametrize("data", [
    b"", b"f 644 1000 1000 1 0 " + b"1" * 40 + b"\0a\0",  # no umask record first
    b"u 22 1000 1000 0 0 -\0-\0f 644 1000 1000 1 0 x\0../escape\0",
    b"u 22 1000 1000 0 0 -\0-\0f 644 1000 1000 1 0 x\0/abs\0",
    b"u 22 1000 1000 0 0 -\0-\0f 644 1000 1000 1 0 x\0a//b\0",
    b"u 22 1000 1000 0 0 -\0-\0f 644 1000 1000 1 0 x\0a\0f 644 1000 1000 1 0 x\0a\0",  # twice
    b"u 22 1000 1000 0 0 -\0-\0f 644 1000\0a\0",
    b"u 22 1000 1000 0 0 -\0-\0f 644 1000 1000 1 0 x\0a",  # cut short
])
def test_a_malformed_listing_is_refused(data):
    with pytest.raises(ValueError):
        parse_manifest(data)


def test_small_files_are_copied_whole_by_default(start_sandbox, demo_repo: Path):
    sandbox = start_sandbox(demo_repo)
    box = ToolBox(sandbox, default_policy(), verifier_command="python3 -m pytest -q")
    box.start_early()
    assert box.command("bash", "sed -i 's/a - b/a + b/' calc.py", None).ok
    assert box.submit().verifier_passed
    [stats] = sandbox.starting.refills
    assert stats.full and stats.why_full is not None and "small files" in stats.why_full


def test_a_listing_that_does_not_parse_falls_back_to_the_full_copy(start_sandbox, demo_repo: Path, monkeypatch):
    sandbox = start_sandbox(demo_repo)
    monkeypatch.setattr("sandbox.starting_copy.parse_manifest", lambda data: parse_manifest(b""))
    box = ToolBox(sandbox, default_policy(), verifier_command="python3 -m pytest -q")
    box.copy_changed_only = True
    box.start_early()
    assert box.command("bash", "sed -i 's/a - b/a + b/' calc.py", None).ok
    assert box.submit().verifier_passed
    [stats] = sandbox.starting.refills
    assert stats.full and stats.why_full is not None and "did not parse" in stats.why_full
