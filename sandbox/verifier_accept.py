"""What the verifier takes from the patch: an allow-list, as pure data.

By default a file the patch adds or changes reaches the verifier only when it
is text of a kind the starting copy already holds, under a path that makes no
new importable name, plugin, startup hook or test input. The rules are named
(``Refusal.rule``), so each path left out is flagged with the rule that left
it out. ``[verify] accept`` globs take paths past these rules deliberately.

Names are compared after Unicode NFKC normalisation and case folding: a
``Forge.Dist-Info`` directory is found by ``importlib.metadata`` (it lowers
names), and a checkout on a case-insensitive file system sees ``CONFTEST.py``
as ``conftest.py``. The rules refuse more than the interpreter would load;
that is the point of an allow-list.
"""

from __future__ import annotations

import codecs
import fnmatch
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sandbox.export_stream import LINK, text

Entries = Mapping[bytes, tuple[str, str]]  # path -> (git mode, blob sha)

# Package metadata importlib.metadata reads from any sys.path directory (its
# entry points load pytest11 plugins without configuration), eggs and links.
_METADATA = (".dist-info", ".egg-info", ".egg-link", ".egg")
# What an import finds besides source: extension modules of any ABI tag
# (calc.cpython-311-x86_64-linux-gnu.so, calc.abi3.so, calc.so, calc.pyd).
_EXTENSION = (".so", ".pyd", ".dll", ".dylib")
_BYTECODE = (".pyc", ".pyo")
# Files pytest reads as configuration or runs before any test, and modules
# the interpreter imports at start.
TEST_CONFIGS = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
                          "setup.cfg", "pyproject.toml", "noxfile.py"})
STARTUP_MODULES = frozenset({"sitecustomize", "usercustomize"})
# pytest collects these as doctests by default (--doctest-glob).
_DOCTEST_GLOB = "test*.txt"
_PYTHON_SUFFIXES = (".py", ".pyw", ".pyi")
# PEP 263, as the tokenizer reads it (tokenize.cookie_re, blank_re).
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.ASCII)
_BLANK = re.compile(rb"^[ \t\f]*(?:[#\r\n]|$)", re.ASCII)
# A line as the tokenizer splits them (a last one without its end included).
_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Refusal:
    """Why a path the patch brings is not taken: the rule and the particulars."""

    rule: str
    why: str

    def __str__(self) -> str:
        return f"rule {self.rule!r}: {self.why}"


def folded(name: str) -> str:
    """``name`` as the rules compare it: NFKC, case-folded, NFKC again."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())


def kind(leaf: str) -> str:
    """A file's kind: its last suffix (``.py``), or for a name without one
    (``Makefile``, ``.gitignore``) the whole name."""
    dot = leaf.rfind(".")
    return leaf[dot:] if dot > 0 else leaf


def _stem(leaf: str) -> str:
    return leaf.partition(".")[0] if not leaf.startswith(".") else leaf


class AcceptRules:
    """The path rules for one starting copy. ``protected`` matches the
    policy's protected and hidden paths; ``installed`` the import names the
    image provides."""

    def __init__(self, base: Entries, installed: frozenset[str], protected: Callable[[str], bool]) -> None:
        paths = [text(raw) for raw in base]
        self.kinds = frozenset(kind(p.rsplit("/", 1)[-1]) for p in paths)
        self.packages = frozenset(p.rsplit("/", 1)[0] if "/" in p else "" for p in paths
                                  if folded(_stem(p.rsplit("/", 1)[-1])) == "__init__")
        self.test_dirs = frozenset(p.rsplit("/", 1)[0] if "/" in p else "" for p in paths if protected(p))
        self.protected_files = frozenset(folded(p) for p in paths if protected(p))
        self.installed = frozenset(folded(n) for n in installed)
        self.protected = protected

    def path_refusal(self, path: str, mode: str) -> Refusal | None:
        """The first rule ``path`` (added or changed, git ``mode``) fails, or None."""
        parts = path.split("/")
        leaf, names = parts[-1], [folded(p) for p in parts]
        name = names[-1]
        if mode == LINK:
            return Refusal("link", "a symbolic link; the verifier takes regular files only")
        for part, shown in zip(names, parts, strict=True):
            if part.endswith(_METADATA):
                return Refusal("metadata", f"{shown!r} is package metadata (its entry points load plugins)")
        if name.endswith(".pth"):
            return Refusal("pth", "a .pth file runs code at interpreter start")
        if name.endswith(_EXTENSION) or ".so." in name:
            return Refusal("extension module", "a compiled module is imported in place of the source")
        if name.endswith(_BYTECODE) or "__pycache__" in names:
            return Refusal("bytecode", "compiled bytecode is imported in place of the source")
        if fnmatch.fnmatchcase(name, _DOCTEST_GLOB):
            return Refusal("doctest", f"pytest collects {_DOCTEST_GLOB} files as doctests")
        if name in TEST_CONFIGS:
            return Refusal("test config", f"{leaf!r} configures or extends pytest")
        if folded(_stem(leaf)) in STARTUP_MODULES:
            return Refusal("startup", f"{leaf!r} runs at interpreter start")
        if (package := self._package_refusal(parts, names)) is not None:
            return package
        if kind(leaf) not in self.kinds:
            return Refusal("kind", f"{kind(leaf)!r} is not a kind of file the starting copy holds")
        return None

    def _package_refusal(self, parts: list[str], names: list[str]) -> Refusal | None:
        """A new ``__init__`` that makes an importable package standing in
        front of a test module or an installed one, or changes how pytest
        names the tests (the root, a directory of protected tests)."""
        if _stem(names[-1]) != "__init__":
            return None
        parent = "/".join(parts[:-1])
        if parent in self.packages:
            return None  # already a package in the starting copy
        if not parent:
            return Refusal("package", "a new root __init__ changes how pytest imports the tests")
        package, above = parts[-2], "/".join(parts[:-2])
        sibling = f"{above}/{package}.py" if above else f"{package}.py"
        if self.protected(sibling) or folded(sibling) in self.protected_files:
            return Refusal("package", f"a new package {package!r} is named like the protected test module "
                                      f"{sibling!r}")
        if names[-2] in self.installed:
            return Refusal("package", f"a new package {package!r} is named like an installed module")
        if parent in self.test_dirs:
            return Refusal("package", f"a new __init__ in {parent!r} changes how pytest imports its tests")
        return None


class TextCheck:
    """Whether a file's content is acceptable text, fed a chunk at a time:
    UTF-8 (ASCII included), no NUL byte, and for Python source a PEP 263
    coding declaration, if any, that names UTF-8 or ASCII."""

    def __init__(self, path: str) -> None:
        leaf = path.rsplit("/", 1)[-1]
        self._python = folded(leaf).endswith(_PYTHON_SUFFIXES)
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._offset = 0
        self._head = b""  # the first two lines, for the coding declaration
        self._refusal: Refusal | None = None

    def feed(self, chunk: bytes) -> None:
        if self._refusal is not None:
            return
        if len(_LINE_END.findall(self._head)) < 2:
            self._head += chunk
        if (nul := chunk.find(b"\0")) >= 0:
            self._refusal = Refusal("text", f"a NUL byte at offset {self._offset + nul}")
        else:
            try:
                self._decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                self._refusal = Refusal("text", f"not UTF-8 (byte 0x{chunk[exc.start]:02x} at offset "
                                                f"{self._offset + exc.start})")
        self._offset += len(chunk)

    def result(self) -> Refusal | None:
        """The refusal, or None: the content is acceptable text."""
        if self._refusal is None:
            try:
                self._decoder.decode(b"", final=True)
            except UnicodeDecodeError:
                self._refusal = Refusal("text", "not UTF-8 (a truncated sequence at the end)")
        if self._refusal is None and (self._python or _python_script(self._head)):
            self._refusal = coding_refusal(self._head)
        return self._refusal


def _python_script(head: bytes) -> bool:
    """A file run as Python by its first line (``#!/usr/bin/env python3``)."""
    first = _LINE.match(head)
    return head.startswith(b"#!") and first is not None and b"python" in first[0]


def declared_coding(head: bytes) -> str | None:
    """The encoding a PEP 263 declaration in the first two lines names, as
    written, or None (as ``tokenize.detect_encoding`` finds it)."""
    if head.startswith(_BOM):
        head = head[len(_BOM):]
    for number, line in enumerate(_LINE.findall(head)[:2]):
        if (match := _CODING.match(line)) is not None:
            return match[1].decode("ascii")
        if number == 0 and not _BLANK.match(line):
            return None  # code on line 1: line 2 is not read for a declaration
    return None


def coding_refusal(head: bytes) -> Refusal | None:
    """A refusal when the declaration names anything but UTF-8 or ASCII."""
    name = declared_coding(head)
    if name is None:
        return None
    normal = name.lower().replace("_", "-")
    if normal == "utf-8" or normal.startswith("utf-8-"):  # the tokenizer's own reading (utf-8-sig, utf-8-unix)
        return None
    try:
        found = codecs.lookup(name).name
    except LookupError:
        return Refusal("text", f"the coding declaration names an unknown encoding {name!r}")
    if found in ("utf-8", "ascii"):
        return None
    return Refusal("text", f"the coding declaration names {name!r}: Python reads the file otherwise than "
                           "the diff shows it")


def text_refusal(path: str, data: bytes) -> Refusal | None:
    """``TextCheck`` of content held whole (tests, small files)."""
    check = TextCheck(path)
    check.feed(data)
    return check.result()
