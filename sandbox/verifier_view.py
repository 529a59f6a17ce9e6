"""The verifier's copy: what the fresh container holds when ``submit`` runs
the verifier.

It is the starting copy with the patch applied, except where the policy says
the patch may not decide (``[verify]``, ``[paths] deny``):

- hidden and protected paths come from the starting copy, whatever the patch
  did to them (added, changed or deleted); what the patch put in their place
  or under them (a directory where a test file was) is dropped: they win
  every path conflict;
- paths denied to the model are left out, unless ``[verify] reads`` names
  them: the verifier runs code the model wrote, which could read them;
- a module or distribution the patch adds where the verifier's interpreter
  would import it in place of an installed one (``pytest/__init__.py``,
  ``json.py``) is left out;
- anything else the patch adds or changes must pass the allow-list
  (``sandbox.verifier_accept``: text of a kind the starting copy holds, under
  a path that makes no new importable name, plugin or test input) unless
  ``[verify] accept`` names it: an added file that fails is left out, a
  changed one is verified as the starting copy had it.

Each path the patch touched that is treated so becomes a ``Flag``. The copy is
streamed as a tar, one blob at a time from the private git dir
(``sandbox.git_blobs``), so host memory stays bounded by the largest file
however large the workspace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from policies import Flag, FlagReason, VerifyGrants
from policies.paths import matcher
from sandbox.errors import WorkspaceError
from sandbox.export_stream import LINK, text
from sandbox.git_blobs import BlobReader
from sandbox.hostgit import PrivateGit
from sandbox.verifier_accept import AcceptRules, Refusal

Entries = Mapping[bytes, tuple[str, str]]  # path -> (git mode, blob sha)
ContentCheck = Callable[[str, str], "Refusal | None"]  # (path, blob sha) -> why it is not acceptable text

# A module file an ``import NAME`` finds in a sys.path directory (extension
# modules carry an ABI tag: json.cpython-311-x86_64-linux-gnu.so).
_MODULE_FILE = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\.py|\.pyw|(?:\.[A-Za-z0-9_-]+)?\.so)")
# Distribution metadata in a sys.path directory is read by importlib.metadata:
# its entry points load pytest plugins (pytest11) without any configuration.
_DISTRIBUTION = re.compile(r".+\.(?:dist-info|egg-info)")
# Imported at interpreter start or by the verifier itself, whatever the
# installed set says.
ALWAYS_SHADOWED = frozenset({"sitecustomize", "usercustomize", "pytest", "_pytest", "unittest", "pluggy", "py",
                             "escrow_evidence"})

# Listed with -I (no cwd, no user site, no PYTHON* variables) from the image's
# own read-only root: what the verifier's interpreter can import before any
# workspace file.
INSTALLED_MODULES_SCRIPT = (
    "import json, pkgutil, sys\n"
    "names = set(sys.stdlib_module_names) | set(sys.builtin_module_names)\n"
    "names |= {m.name for m in pkgutil.iter_modules()}\n"
    "print(json.dumps(sorted(names)))\n"
)


@dataclass(frozen=True)
class VerifierCopy:
    """The verifier's files and what the policy changed in them; ``view``:
    the starting copy as the verifier may see it (its repository's HEAD,
    and what the trusted pre-pass collects the required tests from)."""

    entries: Entries
    flags: tuple[Flag, ...]
    view: Entries = field(default_factory=dict)


def _path_dir(entries: Entries, parts: list[str]) -> bool:
    """Whether the directory ``parts`` could be on the verifier's sys.path:
    the workspace root (the verifier's working directory), or a directory
    that is not a package (pytest's rootdir insertion, configured paths)."""
    if not parts:
        return True
    return not any(("/".join([*parts, init])).encode("utf-8", "surrogateescape") in entries
                   for init in ("__init__.py", "__init__.pyw"))


def shadowed_name(path: str, entries: Entries, installed: frozenset[str]) -> str | None:
    """The installed import name ``path`` would shadow, or None."""
    parts = path.split("/")
    for depth in range(len(parts) - 1):
        if _DISTRIBUTION.fullmatch(parts[depth]) and _path_dir(entries, parts[:depth]):
            return parts[depth]
    leaf, parent = parts[-1], parts[:-1]
    module = _MODULE_FILE.fullmatch(leaf)
    if module is None:
        return None
    if module["name"] in installed and _path_dir(entries, parent):
        return module["name"]
    # A module file anywhere in a package directory named like an installed
    # one (pytest/__init__.py, pytest/__main__.py): with its __init__ it is
    # the package ``python -m pytest`` runs.
    for depth in range(len(parent)):
        if parent[depth] in installed and _path_dir(entries, parts[:depth]):
            return parent[depth]
    return None


def plan_copy(base: Entries, after: Entries, verify: VerifyGrants, deny: tuple[str, ...],
              installed: frozenset[str], content: ContentCheck) -> VerifierCopy:
    """The verifier's entries from the starting copy (``base``) and the
    model's after-state, and a flag for each path the policy overrode.
    ``content(path, sha)`` says why a blob is not acceptable text, or None;
    it is asked only of files the patch added or changed that pass the path
    rules."""
    names = installed | ALWAYS_SHADOWED
    hidden, denied, readable, protected, accepted = (
        matcher(g) for g in (verify.hidden, deny, verify.reads, verify.protect, verify.accept))
    rules = AcceptRules(base, names, lambda path: protected(path) or hidden(path))
    refused: dict[bytes, Refusal] = {}
    for raw, entry in after.items():
        if entry != base.get(raw) and not accepted(path := text(raw)):
            if (refusal := rules.path_refusal(path, entry[0])) is not None:
                refused[raw] = refusal
    # The packages the verifier's copy will have: a refused __init__ makes none.
    view = {raw: entry for raw, entry in after.items() if raw not in refused}
    entries: dict[bytes, tuple[str, str]] = {}
    flags: list[Flag] = []
    winners: dict[str, FlagReason] = {}  # restored protected and hidden files: they win a path conflict
    for raw in sorted(base.keys() | after.keys()):
        path, before, now = text(raw), base.get(raw), after.get(raw)
        changed = before != now
        if hidden(path):
            chosen, reason = before, FlagReason.HIDDEN
        elif denied(path) and not readable(path):
            continue  # denied to the model: never given to code it wrote
        elif protected(path):
            chosen, reason = before, FlagReason.PROTECTED
        elif before is None and (name := shadowed_name(path, view, names)):
            flags.append(Flag(path=path, reason=FlagReason.SHADOWING.value,
                              detail=f"added; would shadow the installed {name!r}; left out of verification"))
            continue
        elif now is not None and changed and (refusal := refused.get(raw) or _content_refusal(
                path, now, accepted, content)) is not None:
            chosen, reason = before, FlagReason.NOT_ACCEPTED
            kept = ("added; left out of verification" if before is None
                    else "changed; the starting copy's version was verified")
            flags.append(Flag(path=path, reason=reason.value, detail=f"{kept}: {refusal}"))
            changed = False  # flagged here, with its rule
        else:
            chosen, reason = now, None
        if chosen is not None:
            entries[raw] = chosen
            if reason in (FlagReason.HIDDEN, FlagReason.PROTECTED):
                winners[path] = reason
        if reason is not None and changed:
            detail = ("added; left out of verification" if before is None
                      else "deleted; restored from the starting copy for verification" if now is None
                      else "changed; the starting copy's version was verified")
            flags.append(Flag(path=path, reason=reason.value, detail=detail))
    flags += _drop_conflicts(entries, winners, base)
    return VerifierCopy(entries=entries, flags=tuple(flags))


def _content_refusal(path: str, entry: tuple[str, str], accepted: Callable[[str], bool],
                     content: ContentCheck) -> Refusal | None:
    if accepted(path) or entry[0] == LINK:
        return None
    return content(path, entry[1])


def _drop_conflicts(entries: dict[bytes, tuple[str, str]], winners: Mapping[str, FlagReason],
                    base: Entries) -> list[Flag]:
    """Protected and hidden files win a path conflict: what the patch put in
    their place (a directory: ``test_calc.py/x``; a file or link where their
    directory was) is dropped and flagged, so the copy is always a tree."""
    if not winners:
        return []
    flags = []
    above = {"/".join(p.split("/")[:depth]) for p in winners for depth in range(1, p.count("/") + 1)}
    for raw in sorted(entries):
        path = text(raw)
        if path in winners or entries[raw] == base.get(raw):
            continue
        parts = path.split("/")
        under = next((w for w in ("/".join(parts[:d]) for d in range(1, len(parts))) if w in winners), None)
        if under is None and path not in above:
            continue
        del entries[raw]
        owner = under or next(w for w in sorted(winners) if w.startswith(path + "/"))
        what = "hidden file" if winners[owner] is FlagReason.HIDDEN else f"protected file {owner!r}"
        where = "under" if under else "in the place of the directory of"
        flags.append(Flag(path=path, reason=winners[owner].value,
                          detail=f"{where} the {what}; left out of verification"))
    return flags


def starting_view(base: Entries, verify: VerifyGrants, deny: tuple[str, ...]) -> Entries:
    """The starting copy less the paths denied to the model that ``reads``
    does not grant: what the verifier's repository and pre-pass hold."""
    return plan_copy(base, base, verify, deny, frozenset(), lambda _path, _sha: None).entries


def plan_from_git(git: PrivateGit, base: Entries, after: Entries, verify: VerifyGrants, deny: tuple[str, ...],
                  installed: frozenset[str]) -> VerifierCopy:
    """``plan_copy`` with the blobs' content read from the private git dir."""
    reader = BlobReader(git)
    try:
        return plan_copy(base, after, verify, deny, installed, reader.text_refusal)
    finally:
        reader.close()


def installed_modules(listing: str) -> frozenset[str]:
    """Parse what ``INSTALLED_MODULES_SCRIPT`` printed."""
    try:
        names = json.loads(listing)
    except ValueError as exc:
        raise WorkspaceError(f"the sandbox image did not list its Python modules: {listing[:200]!r}") from exc
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise WorkspaceError("the sandbox image's module listing is not a list of names")
    return frozenset(names)

