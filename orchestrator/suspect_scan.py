"""The scanner behind SUSPECT (``orchestrator.suspect``): in one file's bytes,
each construct that reaches for the machinery of verification, as (code, line,
line text). Python is read with ``ast`` (names resolved through imports,
constant folding, ``exec`` of constants), with a linear token scan where
``ast`` cannot read it; test configuration line by line. Pure."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator

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
_MAX_DEPTH = 3  # exec("...") of a constant is scanned as code, this deep

_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_BLANK_OR_COMMENT = re.compile(rb"^[ \t\f]*(?:[#\r\n]|$)")
_CONFIG_LINE = re.compile(r"addopts|(?:^|\s)-p\s*\S|pytest11|-{1,2}(?:pyargs|rootdir|confcutdir|override-ini)|"
                          r"python_files|python_classes|python_functions|required_plugins", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[ \t]*\.[ \t]*[A-Za-z_][A-Za-z0-9_]*)*")
_PYTEST_HOOK = re.compile(r"^pytest_[a-z0-9_]+$")

Finding = tuple[str, int, str]  # (code, line, text)



def findings(path: str, content: bytes) -> list[Finding]:
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
