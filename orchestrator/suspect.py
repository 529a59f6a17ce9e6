"""SUSPECT: why a passing patch cannot be trusted as a plain PASS.

The code under test runs in the verifier's own process, so a patch that
reaches for the machinery of verification (the test framework's internals,
``os._exit``, ``atexit``, native code, ``sys.modules``, ``builtins``, process
replacement, tracing, signal handlers, import hooks, a non-UTF-8 coding) can
decide its own verdict. ``scan_changes`` reads the files a patch added or
changed, before and after, and names each such construct the patch ADDED
(one a file already had is not the patch's doing). ``flag_reasons`` adds what
the verifier's copy left out. Pure: bytes in, reasons out, never raises on
hostile input (syntax errors, huge or deeply nested files, any encoding).
The scan of one file is ``orchestrator.suspect_scan``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from orchestrator.contract import Frozen
from orchestrator.rollout import reward_of
from orchestrator.suspect_scan import PYTHON_SUFFIXES, TEST_CONFIGS, findings
from policies.model import Flag, FlagReason


class SuspectReason(Frozen):
    """One construct a passing patch added: a stable ``code`` (docs/SANDBOX.md
    lists them), where, and a short human text."""

    code: str
    path: str
    line: int | None = None
    text: str

    def shown(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{self.code} {where}: {self.text}"


# The stable codes, with what each means (docs/SANDBOX.md prints the same list).
CODES: dict[str, str] = {
    "test-framework": "the test framework's internals (_pytest, pluggy, hooks, the plugin manager, pytest_plugins)",
    "os-exit": "os._exit: the process ends without the test framework's report",
    "atexit": "an atexit handler: code that runs after the tests",
    "native-code": "ctypes or cffi: native code that can rewrite anything in the process",
    "sys-modules": "sys.modules changed: a module replaced under its name",
    "builtins": "builtins or __builtins__ reached: the interpreter's names replaced",
    "process": "the process replaced or forked (os.exec*, os.spawn*, posix_spawn, fork, pty)",
    "tracing": "a trace, profile or audit hook (sys.settrace, sys.setprofile, sys.addaudithook)",
    "signal": "a signal handler or timer set",
    "import-hooks": "import machinery (sys.meta_path, sys.path_hooks, importlib loaders)",
    "dynamic-code": "code built at run time (exec, eval, compile, __import__ or getattr with a computed name)",
    "coding": "a coding declaration other than UTF-8: Python reads other code than the diff shows",
    "test-config": "the test framework's configuration (addopts, -p plugins, pytest11 entry points)",
    "unscanned": "a changed file too large or too deeply nested to scan",
    "left-out": "a path the verifier's copy left out",
}

SCAN_MAX_BYTES = 16 * 1024 * 1024  # past this a file is not read at all: ``unscanned``
Changes = Mapping[str, tuple[bytes | None, bytes | None]]


def scan_changes(changes: Changes) -> tuple[SuspectReason, ...]:
    """The reasons a patch's changes give: ``changes`` maps each path the
    patch added or changed to its content before (None: added) and after
    (None: deleted, never a reason). Only what ``after`` has beyond
    ``before`` counts; a file over ``SCAN_MAX_BYTES`` is ``unscanned``."""
    reasons: list[SuspectReason] = []
    for path in sorted(changes):
        before, after = changes[path]
        if after is None:
            continue
        reasons += _file_reasons(path, before, after)
    return tuple(reasons)


def unscanned(path: str, size: int, cap: int = SCAN_MAX_BYTES) -> SuspectReason:
    """A changed file too large to read: it is not taken on trust."""
    return SuspectReason(code="unscanned", path=path, text=f"{size:,} bytes, past the {cap:,} bytes the scan reads")


def flag_reasons(flags: Iterable[Flag]) -> tuple[SuspectReason, ...]:
    """What the verifier's copy left out (a shadowing path, or one not accepted
    for verification): the patch carried something the verdict did not see."""
    out = []
    for flag in flags:
        if flag.reason in (FlagReason.SHADOWING.value, FlagReason.NOT_ACCEPTED.value):
            out.append(SuspectReason(code="left-out", path=flag.path,
                                     text=flag.reason + (f"; {flag.detail}" if flag.detail else "")))
    return tuple(out)


def summary(reasons: Iterable[SuspectReason], limit: int = 5) -> str:
    """The verdict's detail: the reasons, the first ``limit`` of them named."""
    listed = list(reasons)
    named = "; ".join(r.shown() for r in listed[:limit])
    more = f"; and {len(listed) - limit} more" if len(listed) > limit else ""
    return f"the verifier passed, but the patch touches the machinery of verification: {named}{more}"


def scanned(path: str) -> bool:
    """Whether ``scan_changes`` reads this path (Python source, test configuration)."""
    return path.endswith(PYTHON_SUFFIXES) or path.rsplit("/", 1)[-1] in TEST_CONFIGS


def _file_reasons(path: str, before: bytes | None, after: bytes) -> list[SuspectReason]:
    if len(after) > SCAN_MAX_BYTES:
        return [unscanned(path, len(after))]
    try:
        old = findings(path, before) if before is not None and len(before) <= SCAN_MAX_BYTES else []
        new = findings(path, after)
    except (RecursionError, MemoryError):  # past what this interpreter can read: not taken on trust
        return [SuspectReason(code="unscanned", path=path, text="too deeply nested to scan")]
    # A construct counts once per line of text that holds it: one the file
    # already had as many times is not the patch's.
    had = Counter((code, text) for code, _, text in old)
    out = []
    for code, line, text in sorted(new, key=lambda f: f[1]):
        if had[(code, text)] > 0:
            had[(code, text)] -= 1
            continue
        out.append(SuspectReason(code=code, path=path, line=line, text=_describe(code, text)))
    return out

_LABELS = {
    "test-framework": "test framework internals", "os-exit": "os._exit", "atexit": "atexit handler",
    "native-code": "native code", "sys-modules": "sys.modules changed", "builtins": "builtins edited",
    "process": "process replaced", "tracing": "trace hook", "signal": "signal handler",
    "import-hooks": "import machinery", "dynamic-code": "code built at run time", "coding": "non-UTF-8 coding",
    "test-config": "test configuration",
}


def _describe(code: str, text: str) -> str:
    line = " ".join(text.split())
    return f"{_LABELS[code]}: {line[:100]}{'…' if len(line) > 100 else ''}"

def reward_fields(verdict: str | None, reasons: Iterable[object] = ()) -> dict[str, object]:
    """What every export writes of a run's verdict as a reward: ``reward``
    1.0 for PASS, 0.0 for a failing model verdict, null where the verdict
    says nothing of the patch (SUSPECT, INFRA_ERROR, CANCELED, an imported or
    unfinished run); ``suspect`` true for SUSPECT, with ``suspect_reasons``
    (each ``code path:line: text``), so a SUSPECT run is never a pass and
    never silently a failure."""
    fields: dict[str, object] = {"reward": reward_of(verdict), "suspect": verdict == "SUSPECT"}
    if verdict == "SUSPECT":
        shown = []
        for item in reasons:
            try:
                shown.append(SuspectReason.model_validate(item).shown())
            except ValueError:  # a malformed recorded reason is still named, as recorded
                shown.append(str(item)[:200])
        fields["suspect_reasons"] = shown
    return fields
