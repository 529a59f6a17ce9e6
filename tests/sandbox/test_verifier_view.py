"""The verifier's copy as pure data: which entries the verifier gets from the
starting copy, the patch, or not at all, and which paths are flagged why."""

from __future__ import annotations

import pytest

from policies import FlagReason, VerifyGrants
from sandbox.verifier_view import ALWAYS_SHADOWED, describe_binary_text, plan_copy, shadowed_name

INSTALLED = frozenset({"json", "inspect", "test", "pytest", "_pytest", "pluggy", "iniconfig", "os"})
DENY = (".git", ".git/**", "secrets/**")


def entries(*paths: str, sha: str = "a") -> dict[bytes, tuple[str, str]]:
    return {p.encode("utf-8", "surrogateescape"): ("100644", f"{sha}-{p}") for p in paths}


BASE = entries("calc.py", "test_calc.py", "pkg/__init__.py", "pkg/core.py", "secrets/key.txt", "README.md")


def plan(after: dict, verify: VerifyGrants | None = None):
    return plan_copy(BASE, after, verify or VerifyGrants(), DENY, INSTALLED)


def test_an_unprotected_change_is_verified_as_the_patch_made_it():
    after = {**BASE, **entries("calc.py", "new.py", sha="b")}
    copy = plan(after)
    assert copy.entries[b"calc.py"] == after[b"calc.py"] and copy.entries[b"new.py"] == after[b"new.py"]
    assert copy.flags == ()


@pytest.mark.parametrize("path", ["conftest.py", "sub/conftest.py", "pytest.ini", "deep/pytest.ini", "tox.ini",
                                  "setup.cfg", "pyproject.toml", "pkg/pyproject.toml", "test_x.py", "pkg/x_test.py",
                                  "tests/helpers.py", "src/tests/data.json", ".github/workflows/ci.yml",
                                  ".gitlab-ci.yml", "pytest.toml", "noxfile.py"])
def test_an_added_protected_path_is_left_out_and_flagged(path):
    copy = plan({**BASE, **entries(path, sha="b")})
    assert path.encode() not in copy.entries
    assert [(f.path, f.reason) for f in copy.flags] == [(path, FlagReason.PROTECTED.value)]


def test_a_changed_or_deleted_protected_path_comes_from_the_starting_copy():
    changed = plan({**BASE, **entries("test_calc.py", sha="b")})
    assert changed.entries[b"test_calc.py"] == BASE[b"test_calc.py"] and "changed" in changed.flags[0].detail
    deleted = plan({k: v for k, v in BASE.items() if k != b"test_calc.py"})
    assert deleted.entries[b"test_calc.py"] == BASE[b"test_calc.py"] and "deleted" in deleted.flags[0].detail


def test_an_unchanged_protected_path_is_not_flagged():
    assert plan(dict(BASE)).flags == ()


def test_a_task_that_writes_tests_protects_less():
    verify = VerifyGrants(protect=("**/conftest.py",))
    copy = plan({**BASE, **entries("test_new.py", sha="b")}, verify)
    assert b"test_new.py" in copy.entries and copy.flags == ()


def test_denied_paths_are_left_out_unless_the_verifier_may_read_them():
    assert b"secrets/key.txt" not in plan(dict(BASE)).entries
    granted = plan(dict(BASE), VerifyGrants(reads=("secrets/**",)))
    assert granted.entries[b"secrets/key.txt"] == BASE[b"secrets/key.txt"]


def test_a_denied_path_the_model_wrote_is_left_out_too():
    assert b"secrets/new.txt" not in plan({**BASE, **entries("secrets/new.txt", sha="b")}).entries


def test_hidden_paths_come_from_the_starting_copy_whatever_the_patch_did():
    verify = VerifyGrants(hidden=("test_calc.py", "hidden/**"))
    base_and_hidden = {**BASE, **entries("hidden/t.py")}
    after = {**{k: v for k, v in BASE.items() if k != b"test_calc.py"}, **entries("hidden/t.py", "hidden/n.py",
                                                                                  sha="b")}
    copy = plan_copy(base_and_hidden, after, verify, DENY, INSTALLED)
    assert copy.entries[b"test_calc.py"] == BASE[b"test_calc.py"]
    assert copy.entries[b"hidden/t.py"] == base_and_hidden[b"hidden/t.py"] and b"hidden/n.py" not in copy.entries
    assert {(f.path, f.reason) for f in copy.flags} == {(p, FlagReason.HIDDEN.value) for p in
                                                        ("test_calc.py", "hidden/t.py", "hidden/n.py")}


@pytest.mark.parametrize(("path", "name"), [
    ("pytest.py", "pytest"), ("pytest/__init__.py", "pytest"), ("pytest/__main__.py", "pytest"),
    ("_pytest/__init__.py", "_pytest"), ("json.py", "json"), ("inspect.py", "inspect"),
    ("json.cpython-311-x86_64-linux-gnu.so", "json"), ("json.abi3.so", "json"), ("sitecustomize.py", "sitecustomize"),
    ("usercustomize.py", "usercustomize"), ("tools/json.py", "json"), ("pluggy/hooks.py", "pluggy"),
    ("forge.dist-info/entry_points.txt", "forge.dist-info"), ("x.egg-info/entry_points.txt", "x.egg-info"),
    ("lib/x.dist-info/METADATA", "x.dist-info"),
])
def test_a_module_that_would_shadow_an_installed_one_is_named(path, name):
    after = {**BASE, **entries(path, sha="b")}
    assert shadowed_name(path, after, INSTALLED | ALWAYS_SHADOWED) == name
    copy = plan(after)
    assert path.encode() not in copy.entries
    assert [(f.path, f.reason) for f in copy.flags] == [(path, FlagReason.SHADOWING.value)]


@pytest.mark.parametrize("path", ["pkg/json.py", "pkg/inspect.py", "calc_json.py", "json.txt", "jsonx.py",
                                  "pkg/sub/pytest.py", "docs/json.md", "pkg/x.dist-info/METADATA"])
def test_a_module_inside_a_package_or_not_a_module_shadows_nothing(path):
    after = {**BASE, **entries(path, "pkg/sub/__init__.py", sha="b")}
    assert shadowed_name(path, after, INSTALLED | ALWAYS_SHADOWED) is None
    assert path.encode() in plan(after).entries


def test_a_shadowing_name_the_starting_copy_already_had_is_the_users_own():
    base = {**BASE, **entries("inspect.py")}
    copy = plan_copy(base, {**base, **entries("inspect.py", sha="b")}, VerifyGrants(), DENY, INSTALLED)
    assert copy.entries[b"inspect.py"][1] == "b-inspect.py" and copy.flags == ()


def test_names_that_are_not_utf8_are_matched_as_their_bytes():
    raw = "caf\udce9/test_x.py"
    copy = plan({**BASE, **entries(raw, sha="b")})
    assert raw.encode("utf-8", "surrogateescape") not in copy.entries and copy.flags[0].path == raw


@pytest.mark.parametrize(("path", "data"), [
    ("pytest.ini", b"[pytest]\naddopts = --collect-only\n# \x00\n"),
    ("notes", b"plain words\x00 and more plain words " * 20),
    ("calc.py", b"\x00" + b"def f():\n    return 1\n"),
])
def test_text_that_diffs_as_binary_is_described(path, data):
    detail = describe_binary_text(path, len(data), data[:8000], data.count(0))
    assert detail is not None and f"{len(data):,} bytes" in detail and "NUL" in detail
    assert f"first at offset {data.index(0)}" in detail


@pytest.mark.parametrize(("path", "data"), [
    ("logo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))),
    ("calc.py", "def f():\n    return 'caf\u00e9'\n".encode("latin-1")),  # not UTF-8, yet git diffs it as text
    ("blob.bin", bytes(range(256)) * 4),
])
def test_binary_files_and_plain_text_are_not_described(path, data):
    assert describe_binary_text(path, len(data), data[:8000], data.count(0)) is None
