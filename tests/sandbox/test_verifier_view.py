"""The verifier's copy as pure data: which entries the verifier gets from the
starting copy, the patch, or not at all, and which paths are flagged why."""

from __future__ import annotations

import codecs

import pytest

from policies import ApplyGrants, FlagReason, VerifyGrants
from sandbox.binary_text import describe_binary_text
from sandbox.export_stream import text
from sandbox.verifier_accept import TextCheck, declared_coding, text_refusal
from sandbox.verifier_view import ALWAYS_SHADOWED, plan_copy, shadowed_name

INSTALLED = frozenset({"json", "inspect", "test", "pytest", "_pytest", "pluggy", "iniconfig", "os"})
DENY = (".git", ".git/**", "secrets/**")


def entries(*paths: str, sha: str = "a") -> dict[bytes, tuple[str, str]]:
    return {p.encode("utf-8", "surrogateescape"): ("100644", f"{sha}-{p}") for p in paths}


BASE = entries("calc.py", "test_calc.py", "pkg/__init__.py", "pkg/core.py", "secrets/key.txt", "README.md")


def plain_text(path: str, sha: str) -> None:
    return None


def plan(after: dict, verify: VerifyGrants | None = None):
    return plan_copy(BASE, after, verify or VerifyGrants(), DENY, INSTALLED, plain_text)


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
    copy = plan_copy(base_and_hidden, after, verify, DENY, INSTALLED, plain_text)
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
    copy = plan(after)
    if path.endswith("METADATA"):  # not a shadow, yet package metadata: the allow-list leaves it out
        assert [(f.path, f.reason) for f in copy.flags] == [(path, FlagReason.NOT_ACCEPTED.value)]
    else:
        assert path.encode() in copy.entries and copy.flags == ()


def test_a_shadowing_name_the_starting_copy_already_had_is_the_users_own():
    base = {**BASE, **entries("inspect.py")}
    copy = plan_copy(base, {**base, **entries("inspect.py", sha="b")}, VerifyGrants(), DENY, INSTALLED, plain_text)
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


# The allow-list (sandbox/verifier_accept.py): what the patch may bring.

def reasons(copy) -> list[tuple[str, str]]:
    return [(f.path, f.reason) for f in copy.flags]


@pytest.mark.parametrize(("path", "rule"), [
    # extension modules of any suffix, the tested module's name or not
    ("calc.cpython-311-x86_64-linux-gnu.so", "extension module"), ("calc.abi3.so", "extension module"),
    ("calc.so", "extension module"), ("calc.pyd", "extension module"), ("pkg/calc.SO", "extension module"),
    ("libcalc.so.1", "extension module"), ("calc.\uff33\uff2f", "extension module"),
    ("pkg/deep/er/core.cpython-312-aarch64-linux-gnu.so", "extension module"),
    # bytecode, imported in place of its source
    ("__pycache__/calc.cpython-311.pyc", "bytecode"), ("calc.pyc", "bytecode"), ("pkg/__PYCACHE__/x.py", "bytecode"),
    # package metadata, whatever its case or Unicode form
    ("Forge.Dist-Info/entry_points.txt", "metadata"), ("forge.DIST-INFO/METADATA", "metadata"),
    ("\uff46\uff4f\uff52\uff47\uff45.\uff44\uff49\uff53\uff54\uff0d\uff49\uff4e\uff46\uff4f/entry_points.txt",
     "metadata"),
    ("lib/x.Egg-Info/PKG-INFO", "metadata"), ("x.egg-link", "metadata"), ("X.EGG-INFO", "metadata"),
    ("pkg/a/b/Forge.DIST-info/entry_points.txt", "metadata"), ("pkg/x.dist-info/METADATA", "metadata"),
    # .pth files anywhere
    ("x.pth", "pth"), ("pkg/deep/X.PTH", "pth"), ("x.\uff50\uff54\uff48", "pth"),
    # doctest files pytest collects by default
    ("test_x.txt", "doctest"), ("TEST_X.TXT", "doctest"), ("pkg/testdoc.txt", "doctest"), ("Test.Txt", "doctest"),
    # interpreter start hooks where the shadow rule does not see them
    ("pkg/sitecustomize.py", "startup"), ("pkg/UserCustomize.py", "startup"),
    # new packages standing in front of a test module or an installed one, or renaming tests
    ("test_calc/__init__.py", "package"), ("Test_Calc/__init__.py", "package"), ("pkg/test_x/__init__.py", "package"),
    ("__init__.py", "package"), ("__init__.pyi", "package"), ("pkg/json/__init__.py", "package"),
    ("pkg/Inspect/__init__.py", "package"),
    # kinds the starting copy does not hold (it holds .py, .md, .txt)
    ("tool.sh", "kind"), ("Makefile", "kind"), ("notes.PY", "kind"), ("data.bin", "kind"), ("bin/tool", "kind"),
    (".pytest_plugins", "kind"),
])
def test_an_added_file_the_allow_list_refuses_is_left_out_and_flagged_with_its_rule(path, rule):
    copy = plan({**BASE, **entries(path, sha="b")})
    assert path.encode() not in copy.entries
    assert reasons(copy) == [(path, FlagReason.NOT_ACCEPTED.value)]
    assert copy.flags[0].detail.startswith(f"added; left out of verification: rule {rule!r}: "), copy.flags[0]


@pytest.mark.parametrize("path", ["conftest.py", "sub/conftest.py", "CONFTEST.py", "pytest.ini", "pyproject.toml",
                                  "setup.cfg", "pkg/tox.ini", ".pytest.ini", "noxfile.py"])
def test_test_configuration_is_refused_even_when_the_policy_protects_less(path):
    verify = VerifyGrants(protect=("nothing-here",))
    copy = plan({**BASE, **entries(path, sha="b")}, verify)
    assert reasons(copy) == [(path, FlagReason.NOT_ACCEPTED.value)]
    assert "rule 'test config'" in copy.flags[0].detail and path.encode() not in copy.entries


def test_an_existing_conftest_the_policy_does_not_protect_is_verified_as_it_was():
    base = {**BASE, **entries("conftest.py")}
    copy = plan_copy(base, {**base, **entries("conftest.py", sha="b")}, VerifyGrants(protect=()), DENY,
                     INSTALLED, plain_text)
    assert copy.entries[b"conftest.py"] == base[b"conftest.py"]
    assert copy.flags[0].detail.startswith("changed; the starting copy's version was verified: rule 'test config'")


def test_a_link_the_patch_adds_or_makes_is_refused():
    link = {b"calc_link.py": ("120000", "b-link")}
    copy = plan({**BASE, **link})
    assert b"calc_link.py" not in copy.entries and "rule 'link'" in copy.flags[0].detail
    made = plan({**BASE, b"calc.py": ("120000", "b-link")})
    assert made.entries[b"calc.py"] == BASE[b"calc.py"] and "rule 'link'" in made.flags[0].detail


@pytest.mark.parametrize("path", ["calc_fast.py", "pkg/new.py", "docs/guide.md", "pkg/sub/__init__.py",
                                  "notes.txt", "newpkg/__init__.py", "pkg/mod/impl.py"])
def test_text_of_the_repositorys_kinds_under_ordinary_paths_is_taken(path):
    copy = plan({**BASE, **entries(path, sha="b")})
    assert path.encode() in copy.entries and copy.flags == ()


def test_a_package_the_starting_copy_already_had_may_change_its_init():
    copy = plan({**BASE, **entries("pkg/__init__.py", sha="b")})
    assert copy.entries[b"pkg/__init__.py"][1] == "b-pkg/__init__.py" and copy.flags == ()


def test_a_new_init_beside_protected_tests_is_refused():
    base = {**BASE, **entries("sub/test_y.py", "sub/helper.py")}
    copy = plan_copy(base, {**base, **entries("sub/__init__.py", sha="b")}, VerifyGrants(), DENY, INSTALLED,
                     plain_text)
    assert reasons(copy) == [("sub/__init__.py", FlagReason.NOT_ACCEPTED.value)]
    assert "rule 'package'" in copy.flags[0].detail


def test_a_new_init_beside_hidden_tests_is_refused():
    base = {**BASE, **entries("checks/check_mean.py")}
    verify = VerifyGrants(hidden=("checks/check_*.py",))
    copy = plan_copy(base, {**base, **entries("checks/__init__.py", sha="b")}, verify, DENY, INSTALLED, plain_text)
    assert reasons(copy) == [("checks/__init__.py", FlagReason.NOT_ACCEPTED.value)]
    assert "changes how pytest imports its tests" in copy.flags[0].detail


def test_a_refused_root_init_does_not_hide_a_shadowing_module():
    # with the root a package json.py would not shadow; the root __init__ is left out, so it would
    copy = plan({**BASE, **entries("__init__.py", "json.py", sha="b")})
    assert sorted(reasons(copy)) == [("__init__.py", FlagReason.NOT_ACCEPTED.value),
                                     ("json.py", FlagReason.SHADOWING.value)]
    assert b"json.py" not in copy.entries and b"__init__.py" not in copy.entries


CONTENT = {
    "utf7": b"# -*- coding: utf-7 -*-\ndef mean(values):\n    return 0 #+AAo-    return sum(values) / len(values)\n",
    "latin1-line2": b"#!/usr/bin/env python3\n# vim: set fileencoding=latin-1 :\nx = '\xe9'\n",
    "latin1-line2-ascii": b"#!/usr/bin/env python3\n# vim: set fileencoding=latin-1 :\nx = 1\n",
    "cp1252": b"# coding=cp1252\nx = 1\n",
    "bom-latin1": b"\xef\xbb\xbf# coding: latin-1\nx = 1\n",
    "unknown": b"# coding: no-such-codec\nx = 1\n",
    "cr-lines": b"#!python\r# coding: utf-7\rx = 1\r",
    "utf16": "x = 1\n".encode("utf-16"),
    "not-utf8": "x = 'caf\u00e9'\n".encode("latin-1"),
    "nul": b"x = 1\n\x00\n",
    "truncated": b"x = '\xc3",
    "surrogate": b"x = '\xed\xa0\x80'\n",
}


@pytest.mark.parametrize(("name", "why"), [
    ("utf7", "coding declaration names 'utf-7'"), ("latin1-line2", "not UTF-8"),
    ("latin1-line2-ascii", "coding declaration names 'latin-1'"), ("cp1252", "names 'cp1252'"),
    ("bom-latin1", "names 'latin-1'"), ("unknown", "unknown encoding 'no-such-codec'"),
    ("cr-lines", "names 'utf-7'"), ("utf16", "a NUL byte at offset 3"),
    ("not-utf8", "not UTF-8 (byte 0xe9 at offset 8)"),
    ("nul", "a NUL byte at offset 6"), ("truncated", "not UTF-8"), ("surrogate", "not UTF-8"),
])
def test_content_that_is_not_plain_utf8_text_is_refused(name, why):
    refusal = text_refusal("calc.py", CONTENT[name])
    assert refusal is not None and refusal.rule == "text" and why in refusal.why, refusal


@pytest.mark.parametrize("data", [
    b"# coding: utf-8\nx = 1\n", b"# -*- coding: UTF-8 -*-\nx = 1\n", b"# coding=ascii\n", b"# coding: utf_8\n",
    b"# coding: utf-8-sig\n", b"\xef\xbb\xbf# coding: utf-8\nx = 1\n", b"\xef\xbb\xbfx = 1\n",
    b"x = 1\n# coding: utf-7\n",  # code on line 1: Python does not read line 2 for a declaration
    b"x = 1\ny = 2\n# coding: latin-1\n", b"", "s = 'caf\u00e9 \u2603'\n".encode(), b"# coding: us-ascii\n",
])
def test_utf8_python_and_declarations_python_reads_as_utf8_are_taken(data):
    assert text_refusal("calc.py", data) is None


@pytest.mark.parametrize("name", sorted(set(CONTENT) - {"not-utf8", "nul", "truncated", "surrogate", "utf16",
                                                        "latin1-line2", "unknown", "bom-latin1"}))
def test_the_declaration_read_is_the_one_python_reads(name):
    import io
    import tokenize

    data = CONTENT[name].replace(b"\r", b"\n")  # tokenize reads lines at \n only
    python, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    assert declared_coding(data) is not None
    assert codecs.lookup(declared_coding(data)).name == codecs.lookup(python).name


def test_python_refuses_a_bom_with_another_declaration_and_so_does_the_allow_list():
    import io
    import tokenize

    with pytest.raises(SyntaxError):
        tokenize.detect_encoding(io.BytesIO(CONTENT["bom-latin1"]).readline)
    assert text_refusal("calc.py", CONTENT["bom-latin1"]) is not None


def test_a_coding_declaration_outside_python_is_plain_text():
    assert text_refusal("docs/notes.md", CONTENT["utf7"]) is None
    assert text_refusal("bin/run", b"#!/usr/bin/env python3\n# coding: utf-7\n") is not None


def test_a_declaration_split_across_chunks_is_still_read():
    check = TextCheck("calc.py")
    for chunk in (b"# -*- cod", b"ing: utf", b"-7 -*-", b"\nx = 1\n"):
        check.feed(chunk)
    assert (refusal := check.result()) is not None and "utf-7" in refusal.why
    long_line = TextCheck("calc.py")
    long_line.feed(b"#" * 5000)
    long_line.feed(b"\n# coding: latin-1\nx = 1\n")
    assert (refusal := long_line.result()) is not None and "latin-1" in refusal.why


def content_of(data: dict[str, bytes]):
    def check(path: str, sha: str):
        return text_refusal(path, data.get(sha, b"x = 1\n"))
    return check


def test_a_changed_file_that_is_not_text_is_verified_as_the_starting_copy_had_it():
    after = {**BASE, **entries("calc.py", "new.py", sha="b")}
    content = content_of({"b-calc.py": CONTENT["utf7"], "b-new.py": CONTENT["not-utf8"]})
    copy = plan_copy(BASE, after, VerifyGrants(), DENY, INSTALLED, content)
    assert copy.entries[b"calc.py"] == BASE[b"calc.py"] and b"new.py" not in copy.entries
    assert {f.path: f.detail for f in copy.flags} == {
        "calc.py": "changed; the starting copy's version was verified: rule 'text': the coding declaration names "
                   "'utf-7': Python reads the file otherwise than the diff shows it",
        "new.py": "added; left out of verification: rule 'text': not UTF-8 (byte 0xe9 at offset 8)"}
    assert all(f.reason == FlagReason.NOT_ACCEPTED.value for f in copy.flags)


def test_content_is_read_only_for_what_the_patch_added_or_changed_and_passed_the_path_rules():
    asked: list[str] = []

    def content(path: str, sha: str):
        asked.append(path)
        return None

    after = {**BASE, **entries("calc.py", "x.pth", "new.py", sha="b")}
    plan_copy(BASE, after, VerifyGrants(), DENY, INSTALLED, content)
    assert sorted(asked) == ["calc.py", "new.py"]


def test_accept_takes_paths_past_the_allow_list_but_not_past_protection_or_shadowing():
    verify = VerifyGrants(accept=("vendor/**", "**/*.sh", "test_calc.py", "json.py"))
    after = {**BASE, **entries("vendor/lib.so", "vendor/x.dist-info/METADATA", "run.sh", "test_calc.py", "json.py",
                               "other.so", sha="b")}
    copy = plan_copy(BASE, after, verify, DENY, INSTALLED, content_of({"b-vendor/lib.so": b"\x7fELF\x00"}))
    assert copy.entries[b"vendor/lib.so"] == after[b"vendor/lib.so"] and b"run.sh" in copy.entries
    assert dict(reasons(copy)) == {"test_calc.py": FlagReason.PROTECTED.value, "json.py": FlagReason.SHADOWING.value,
                                   "vendor/x.dist-info/METADATA": FlagReason.SHADOWING.value,
                                   "other.so": FlagReason.NOT_ACCEPTED.value}
    assert copy.entries[b"test_calc.py"] == BASE[b"test_calc.py"]


@pytest.mark.parametrize("glob", ["/abs/**", "../x", ""])
def test_accept_globs_are_validated(glob):
    with pytest.raises(ValueError, match="workspace-relative"):
        VerifyGrants(accept=(glob,))


def test_unaccepted_files_are_not_applied_unless_granted():
    assert FlagReason.NOT_ACCEPTED not in ApplyGrants().allowed_reasons()
    assert FlagReason.NOT_ACCEPTED in ApplyGrants(unaccepted_files=True).allowed_reasons()


# Point 5: protected and hidden files win every path conflict.

def assert_tree(copy) -> None:
    paths = {text(raw) for raw in copy.entries}
    assert not [p for p in paths if any(p.startswith(q + "/") for q in paths)], "a file stands where a dir is"


@pytest.mark.parametrize("under", ["test_calc.py/x.py", "test_calc.py/deep/er.py", "test_calc.py/data.txt"])
def test_a_directory_in_the_place_of_a_protected_file_is_dropped(under):
    after = {**{k: v for k, v in BASE.items() if k != b"test_calc.py"}, **entries(under, sha="b")}
    copy = plan(after)
    assert copy.entries[b"test_calc.py"] == BASE[b"test_calc.py"] and under.encode() not in copy.entries
    assert_tree(copy)
    flags = {f.path: f for f in copy.flags}
    assert flags[under].reason == FlagReason.PROTECTED.value and "under the protected file" in flags[under].detail


def test_a_directory_in_the_place_of_a_hidden_file_is_dropped_without_naming_it():
    verify = VerifyGrants(hidden=("hidden_t.py",))
    base = {**BASE, **entries("hidden_t.py")}
    copy = plan_copy(base, {**BASE, **entries("hidden_t.py/x.py", sha="b")}, verify, DENY, INSTALLED, plain_text)
    assert copy.entries[b"hidden_t.py"] == base[b"hidden_t.py"] and b"hidden_t.py/x.py" not in copy.entries
    assert_tree(copy)
    (flag,) = [f for f in copy.flags if f.path == "hidden_t.py/x.py"]
    assert flag.reason == FlagReason.HIDDEN.value and "under the hidden file" in flag.detail


@pytest.mark.parametrize("mode", ["100644", "100755", "120000"])
def test_a_file_or_link_in_the_place_of_a_protected_directory_is_dropped(mode):
    verify = VerifyGrants(protect=("d.py/t.py",), accept=("d.py",))  # accept: past the allow-list, to the conflict
    base = {**BASE, **entries("d.py/t.py")}
    copy = plan_copy(base, {**BASE, b"d.py": (mode, "b-d.py")}, verify, DENY, INSTALLED, plain_text)
    assert copy.entries[b"d.py/t.py"] == base[b"d.py/t.py"] and b"d.py" not in copy.entries
    assert_tree(copy)
    (flag,) = [f for f in copy.flags if f.path == "d.py"]
    assert flag.reason == FlagReason.PROTECTED.value and "in the place of the directory" in flag.detail
