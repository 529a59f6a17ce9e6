"""``sandbox.patch_scan``: the files a passing patch changed, read from a real
private git dir (base and after commits) for the SUSPECT scan: only the
paths the verifier ran, before and after, under the caps."""

from __future__ import annotations

from pathlib import Path

from policies import Flag, FlagReason
from sandbox import patch_scan
from sandbox.export_stream import TreeBuilder
from sandbox.hostgit import PrivateGit
from sandbox.workspace import Patch

CALC = "def mean(v):\n    return sum(v) / (len(v) + 1)\n"


def commits(tmp_path: Path, before: dict[str, bytes], after: dict[str, bytes]) -> tuple[PrivateGit, str, str]:
    git = PrivateGit(tmp_path / "state").init()
    shas = []
    for n, files in enumerate((before, after)):
        tree = TreeBuilder(git)
        for path, data in files.items():
            tree.put(path.encode(), "100644", tree.blob(data))
        shas.append(tree.commit(f"refs/heads/state-{n}"))
    return git, shas[0], shas[1]


def patch(after: str, *flags: Flag) -> Patch:
    return Patch(text="x", sha256="0" * 64, files=(), tree=after, flagged=flags)


def test_what_the_patch_added_is_read_against_what_the_file_had(tmp_path):
    before = {"calc.py": b"import atexit\n" + CALC.encode(), "README.md": b"hi\n"}
    after = {"calc.py": b"import atexit\nimport os\nos._exit(0)\n" + CALC.encode(),
             "README.md": b"import ctypes\n", "new.py": b"import sys\nsys.settrace(None)\n"}
    git, base, tree = commits(tmp_path, before, after)
    reasons = patch_scan.suspect_reasons(git, base, patch(tree))
    assert [(r.code, r.path, r.line) for r in reasons] == [("os-exit", "calc.py", 3), ("tracing", "new.py", 2)]


def test_a_protected_path_is_verified_as_it_was_and_not_read_a_left_out_one_is_a_reason(tmp_path):
    after = {"calc.py": CALC.encode(), "conftest.py": b"import os\nos._exit(0)\n", "pytest.py": b"x = 1\n"}
    git, base, tree = commits(tmp_path, {"calc.py": CALC.encode()}, after)
    flags = (Flag(path="conftest.py", reason=FlagReason.PROTECTED.value, detail="added; left out of verification"),
             Flag(path="pytest.py", reason=FlagReason.SHADOWING.value, detail="added; left out of verification"))
    reasons = patch_scan.suspect_reasons(git, base, patch(tree, *flags))
    assert [(r.code, r.path) for r in reasons] == [("left-out", "pytest.py")]


def test_files_past_the_caps_are_unscanned(tmp_path, monkeypatch):
    monkeypatch.setattr(patch_scan, "TOTAL_MAX_BYTES", 1000)
    after = {"a.py": b"x = 1\n" * 100, "b.py": b"y = 2\n" * 200}
    git, base, tree = commits(tmp_path, {"calc.py": CALC.encode()}, after)
    reasons = patch_scan.suspect_reasons(git, base, patch(tree))
    assert [(r.code, r.path) for r in reasons] == [("unscanned", "b.py")]
