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
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping

from orchestrator.contract import Frozen
from orchestrator.rollout import reward_of
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

_PROCESS = ("exec", "spawn", "posix_spawn", "fork", "login_tty", "kill", "abort")
# (code, module, attribute prefixes or None for the whole module)
_RULES: tuple[tuple[str, str, tuple[str, ...] | None], ...] = (
    ("test-framework", "_pytest", None),
    ("test-framework", "pluggy", None),
    ("test-framework", "pytest", ("hookimpl", "hookspec", "main", "register_assert_rewrite", "PytestPluginManager")),
    ("os-exit", "os", ("_exit",)),
    ("os-exit", "posix", ("_exit",)),
    ("atexit", "atexit", None),
    ("native-code", "ctypes", None),
    ("native-code", "_ctypes", None),
    ("native-code", "cffi", None),
    ("native-code", "_cffi_backend", None),
    ("sys-modules", "sys", ("modules",)),
    ("builtins", "builtins", None),
    ("builtins", "__builtin__", None),
    ("process", "os", _PROCESS),
    ("process", "posix", _PROCESS),
    ("process", "pty", None),
    ("tracing", "sys", ("settrace", "setprofile", "addaudithook", "monitoring", "_current_frames")),
    ("tracing", "threading", ("settrace", "setprofile")),
    ("tracing", "_thread", ("_excepthook",)),
    ("signal", "signal", ("signal", "setitimer", "alarm", "set_wakeup_fd", "siginterrupt", "pthread_kill",
                          "raise_signal", "pthread_sigmask", "sigwait")),
    ("signal", "_signal", None),
    ("import-hooks", "sys", ("meta_path", "path_hooks", "path_importer_cache")),
    ("import-hooks", "importlib", ("machinery", "abc", "util", "_bootstrap", "reload", "invalidate_caches")),
    ("import-hooks", "_imp", None),
    ("import-hooks", "zipimport", None),
)
_SENSITIVE_MODULES = frozenset(module for _, module, _ in _RULES) | {"os", "sys", "importlib"}
# A string constant equal to one of these names reaches for it however it is used.
_SENSITIVE_STRINGS: dict[str, str] = {
    "_exit": "os-exit", "atexit": "atexit", "ctypes": "native-code", "_ctypes": "native-code",
    "cffi": "native-code", "_pytest": "test-framework", "pluggy": "test-framework",
    "pluginmanager": "test-framework", "hookimpl": "test-framework", "pytest_plugins": "test-framework",
    "settrace": "tracing", "setprofile": "tracing", "addaudithook": "tracing", "meta_path": "import-hooks",
    "path_hooks": "import-hooks", "__builtins__": "builtins", "builtins": "builtins",
    "execv": "process", "execve": "process", "execvp": "process", "execvpe": "process", "execl": "process",
    "execle": "process", "execlp": "process", "execlpe": "process", "posix_spawn": "process",
    "posix_spawnp": "process", "forkpty": "process", "fork": "process",
}
# Reading sys.modules is ordinary; these uses of it change nothing.
_READ_METHODS = frozenset({"get", "keys", "items", "values", "copy", "__contains__"})
_DYNAMIC_CALLS = frozenset({"exec", "eval", "compile"})
_IMPORT_CALLS = frozenset({"__import__", "importlib.import_module", "importlib.__import__"})
_NAMING_CALLS = _IMPORT_CALLS | {"getattr"}  # a call that stands for a name: resolved as one

PYTHON_SUFFIXES = (".py", ".pyw")
TEST_CONFIGS = frozenset({"pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "entry_points.txt"})
AST_MAX_BYTES = 2 * 1024 * 1024  # past this a file is read by the token scan alone
SCAN_MAX_BYTES = 16 * 1024 * 1024  # past this a file is not read at all: ``unscanned``
_MAX_DEPTH = 3  # exec("...") of a constant is scanned as code, this deep

_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_BLANK_OR_COMMENT = re.compile(rb"^[ \t\f]*(?:[#\r\n]|$)")
_CONFIG_LINE = re.compile(r"addopts|(?:^|\s)-p\s*\S|pytest11|-{1,2}(?:pyargs|rootdir|confcutdir|override-ini)|"
                          r"python_files|python_classes|python_functions|required_plugins", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[ \t]*\.[ \t]*[A-Za-z_][A-Za-z0-9_]*)*")
_PYTEST_HOOK = re.compile(r"^pytest_[a-z0-9_]+$")

Finding = tuple[str, int, str]  # (code, line, text)
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
        old = _findings(path, before) if before is not None and len(before) <= SCAN_MAX_BYTES else []
        new = _findings(path, after)
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


def _findings(path: str, content: bytes) -> list[Finding]:
    """Every (code, line, line text) in one file, each code once a line."""
    name = path.rsplit("/", 1)[-1]
    if name in TEST_CONFIGS:
        return _dedupe(_config_findings(content))
    if not path.endswith(PYTHON_SUFFIXES):
        return []
    found = list(_coding_findings(content))
    lines = content.splitlines()
    raw: list[tuple[str, int]]
    if len(content) <= AST_MAX_BYTES and (parsed := _parse(content)) is not None:
        raw = list(_Scanner(parsed).scan())
    else:
        raw = list(_token_scan(content))
    for code, line in raw:
        text = lines[line - 1] if 0 < line <= len(lines) else b""
        found.append((code, line, text.decode("utf-8", "replace").strip()))
    return _dedupe(found)


def _dedupe(found: Iterable[Finding]) -> list[Finding]:
    seen: set[tuple[str, int]] = set()
    out = []
    for code, line, text in found:
        if (code, line) not in seen:
            seen.add((code, line))
            out.append((code, line, text))
    return out


def _parse(content: bytes | str) -> ast.Module | None:
    try:
        return ast.parse(content)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError, LookupError, UnicodeError):
        return None


def _coding_findings(content: bytes) -> Iterator[Finding]:
    lines = content.split(b"\n", 2)[:2]
    for index, line in enumerate(lines):
        match = _CODING.match(line)
        if match:
            name = match.group(1).decode("ascii", "replace").lower().replace("_", "-")
            if name != "utf-8" and not name.startswith("utf-8-") and name != "utf8":
                yield "coding", index + 1, line.decode("utf-8", "replace").strip()
            return
        if not _BLANK_OR_COMMENT.match(line):
            return


def _config_findings(content: bytes) -> Iterator[Finding]:
    text = content.decode("utf-8", "replace")
    for number, line in enumerate(text.splitlines(), 1):
        if _CONFIG_LINE.search(line):
            yield "test-config", number, line.strip()


def _token_scan(content: bytes) -> Iterator[tuple[str, int]]:
    """The fallback for what ``ast`` cannot read (too large, or not Python
    this interpreter parses): each dotted name, imported name and quoted word
    matched line by line, conservatively (linear, no backtracking)."""
    text = content.decode("utf-8", "replace")
    for number, line in enumerate(text.splitlines(), 1):
        if not _PREFILTER.search(line):
            continue
        words = [re.sub(r"[ \t]+", "", w) for w in _WORD.findall(line)]
        if imported := re.match(r"\s*from\s+([\w.]+)\s+import\s+(.*)", line):
            words += [f"{imported.group(1)}.{n.strip().split(' ')[0]}" for n in imported.group(2).split(",")]
        words += re.findall(r"""["']([A-Za-z_]+)["']""", line)
        for word in words:
            yield from ((code, number) for code in _codes_of(word))
            last = word.rsplit(".", 1)[-1]
            if last in _SENSITIVE_STRINGS:
                yield _SENSITIVE_STRINGS[last], number
            if last in _DYNAMIC_CALLS | {"__import__", "import_module"} and re.search(rf"\b{last}\s*\(", line):
                yield "dynamic-code", number
            if _PYTEST_HOOK.match(last):
                yield "test-framework", number


_PREFILTER = re.compile("|".join(re.escape(term) for term in sorted(
    {module for _, module, prefixes in _RULES if prefixes is None}
    | {prefix for _, _, prefixes in _RULES for prefix in prefixes or ()}
    | set(_SENSITIVE_STRINGS) | _DYNAMIC_CALLS | {"__import__", "import_module", "pytest_"}, key=len, reverse=True)))


def _codes_of(dotted: str) -> Iterator[str]:
    """The rules a fully resolved dotted name (``os._exit``) matches."""
    for code, module, prefixes in _RULES:
        if dotted != module and not dotted.startswith(module + "."):
            continue
        if prefixes is None:
            yield code
            continue
        rest = dotted[len(module) + 1:]
        if rest and rest.split(".")[0].startswith(prefixes):
            yield code


def _constant(node: ast.AST) -> str | None:
    """A string the expression always is: literals, ``+`` of literals,
    f-strings of literals, ``"".join`` of literals (cheap evasions)."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _constant(node.left) if _shallow(node.left) else None, None
        if left is not None and _shallow(node.right):
            right = _constant(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [_constant(v) if isinstance(v, ast.Constant) else None for v in node.values]
        return "".join(p for p in parts if p is not None) if all(p is not None for p in parts) else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)
            and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple))):
        parts = [_constant(e) if isinstance(e, ast.Constant) else None for e in node.args[0].elts]
        if all(p is not None for p in parts):
            return node.func.value.value.join(p for p in parts if p is not None)
    return None


def _shallow(node: ast.AST) -> bool:
    """Folding recurses: only this deep, so a hostile chain of ``+`` cannot
    exhaust the stack (it is then left unfolded and found by its strings)."""
    depth = 0
    while isinstance(node, ast.BinOp):
        node = node.left
        depth += 1
        if depth > 50:
            return False
    return True


class _Scanner:
    """One module's findings. Names are resolved through its imports
    (``import os as o``, ``from os import _exit``), ``getattr`` with a
    constant name, ``__import__``/``importlib.import_module`` of a constant,
    and ``vars(m)[...]``/``m.__dict__[...]``."""

    def __init__(self, tree: ast.Module, depth: int = 0) -> None:
        self.tree = tree
        self.depth = depth
        self.aliases: dict[str, str] = {}
        self.parents: dict[int, ast.AST] = {}

    def scan(self) -> Iterator[tuple[str, int]]:
        nodes = list(ast.walk(self.tree))  # breadth first and iterative: no recursion on deep trees
        for node in nodes:
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node
        for node in nodes:
            self._bind(node)
        for node in nodes:
            line = getattr(node, "lineno", 0)
            for code in self._node_codes(node):
                yield code, line

    def _bind(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            resolved = self._resolve(node.value)
            if resolved is not None and resolved.split(".")[0] in _SENSITIVE_MODULES:
                self.aliases[node.targets[0].id] = resolved  # o = os; o._exit(0)

    def _node_codes(self, node: ast.AST) -> Iterator[str]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _codes_of(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name == "*":
                    yield from self._star(node.module)
                else:
                    yield from _codes_of(f"{node.module}.{alias.name}")
                    yield from _codes_of(node.module)
        elif isinstance(node, (ast.Attribute, ast.Name, ast.Call, ast.Subscript)):
            yield from self._reference(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _PYTEST_HOOK.match(node.name):
            yield "test-framework"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in _SENSITIVE_STRINGS:
            yield _SENSITIVE_STRINGS[node.value]
        elif isinstance(node, ast.BinOp) and (folded := _constant(node)) in _SENSITIVE_STRINGS:
            yield _SENSITIVE_STRINGS[str(folded)]
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in targets):
                yield "test-framework"

    def _star(self, module: str) -> Iterator[str]:
        codes = {code for code, rule_module, _ in _RULES if rule_module == module.split(".")[0]}
        yield from sorted(codes)

    def _reference(self, node: ast.AST) -> Iterator[str]:
        parent = self.parents.get(id(node))
        if isinstance(node, ast.Attribute) and node.attr in ("pluginmanager", "_pluginmanager"):
            yield "test-framework"
        # Judge the outermost expression of a chain once (os.path.join: not os, os.path).
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(parent, ast.Attribute):
            return
        if isinstance(node, ast.Name) and node.id == "__builtins__":
            yield "builtins"
            return
        if isinstance(node, ast.Call):
            yield from self._call(node)
            if self._callee(node) not in _NAMING_CALLS:
                return  # the callee is judged as a reference of its own
        resolved = self._resolve(node)
        if resolved is None:
            return
        if resolved.split(".")[0] == "__builtins__":
            yield "builtins"
        for code in _codes_of(resolved):
            if code == "sys-modules" and self._reads_only(node, parent):
                continue
            yield code

    def _reads_only(self, node: ast.AST, parent: ast.AST | None) -> bool:
        """``sys.modules[name]``, ``sys.modules.get(name)``, ``name in sys.modules``."""
        if isinstance(node, ast.Subscript):
            return isinstance(node.ctx, ast.Load)
        if isinstance(node, ast.Attribute) and node.attr in _READ_METHODS:
            return isinstance(parent, ast.Call) and parent.func is node
        if isinstance(parent, ast.Subscript) and parent.value is node:
            return isinstance(parent.ctx, ast.Load)
        if isinstance(parent, ast.Compare) and node in parent.comparators:
            return all(isinstance(op, (ast.In, ast.NotIn)) for op in parent.ops)
        return False

    def _call(self, node: ast.Call) -> Iterator[str]:
        func = self._resolve(node.func)
        if func in _DYNAMIC_CALLS and not (isinstance(node.func, ast.Name) and node.func.id in self.aliases):
            source = _constant(node.args[0]) if node.args else None
            if source is None or self.depth >= _MAX_DEPTH:
                yield "dynamic-code"
            elif (inner := _parse(source)) is not None:
                yield from (code for code, _ in _Scanner(inner, self.depth + 1).scan())
            return
        if func in _IMPORT_CALLS:
            name = _constant(node.args[0]) if node.args else None
            if name is None:
                yield "dynamic-code"
            else:
                yield from _codes_of(name)
            return
        if func in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2:
            owner = self._resolve(node.args[0])
            if owner is not None and owner.split(".")[0] in _SENSITIVE_MODULES and _constant(node.args[1]) is None:
                yield "dynamic-code"

    def _resolve(self, node: ast.AST) -> str | None:
        """The dotted name an expression stands for, if it is a name."""
        attrs: list[str] = []
        while True:  # each step goes one node down: it ends however long the chain
            if isinstance(node, ast.Attribute):
                attrs.append(node.attr)
                node = node.value
            elif isinstance(node, ast.Call) and self._callee(node) == "getattr" and len(node.args) >= 2:
                attr = _constant(node.args[1])
                if attr is None:
                    return None
                attrs.append(attr)
                node = node.args[0]
            elif isinstance(node, ast.Call) and self._callee(node) in _IMPORT_CALLS and node.args:
                name = _constant(node.args[0])
                return None if name is None else ".".join([name, *reversed(attrs)])
            elif isinstance(node, ast.Subscript) and (key := _constant(node.slice)) is not None:
                inner = node.value
                if isinstance(inner, ast.Attribute) and inner.attr == "__dict__":
                    attrs.append(key)
                    node = inner.value
                elif isinstance(inner, ast.Call) and self._callee(inner) == "vars" and inner.args:
                    attrs.append(key)
                    node = inner.args[0]
                elif isinstance(inner, ast.Call) and self._callee(inner) in ("globals", "locals"):
                    node = ast.Name(id=key)
                elif self._resolve(inner) == "sys.modules":
                    return ".".join([key, *reversed(attrs)])
                else:
                    return None
            elif isinstance(node, ast.Name):
                base = self.aliases.get(node.id, node.id)
                return ".".join([base, *reversed(attrs)])
            else:
                return None

    def _callee(self, node: ast.Call) -> str | None:
        func = node.func
        if isinstance(func, ast.Name):
            return self.aliases.get(func.id, func.id)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            return f"{self.aliases.get(func.value.id, func.value.id)}.{func.attr}"
        return None


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
