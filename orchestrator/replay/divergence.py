"""Pure diffing of recorded against replayed JSON values: which field paths
differ, in the order that names the cause first, and a readable diff.

Request fields are walked settings first, then tools, then messages: the
volatile tail message ("tokens left") changes whenever anything earlier in the
prompt changes size, so a tool definition or sampling change must be named
before the messages it drags along.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

REQUEST_FIELD_ORDER = (
    "model", "sampling", "max_tokens", "stop", "stream", "deadline_s", "max_payload_bytes",
    "response_format", "tool_choice", "tools", "messages",
)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MISSING = object()
CONTEXT_CHARS = 40


def _key_path(prefix: str, key: str) -> str:
    if _IDENTIFIER.match(key):
        return f"{prefix}.{key}" if prefix else key
    return f"{prefix}[{json.dumps(key, ensure_ascii=False)}]"


def _ordered_keys(a: dict[str, Any], b: dict[str, Any], top: bool) -> list[str]:
    keys = set(a) | set(b)
    if top:
        first = [k for k in REQUEST_FIELD_ORDER if k in keys]
        return first + sorted(keys - set(first))
    return sorted(keys)


def differing_paths(recorded: Any, replayed: Any, *, prefix: str = "", limit: int = 20) -> list[str]:
    """Paths of the leaves that differ, cause-first (see module docstring),
    at most ``limit`` of them. Only called once a hash differs, so it walks
    the whole value rather than trusting ``==`` on containers."""
    out: list[str] = []
    _walk(recorded, replayed, prefix, out, limit, top=not prefix)
    return out


def _walk(a: Any, b: Any, path: str, out: list[str], limit: int, *, top: bool = False) -> None:
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in _ordered_keys(a, b, top):
            _walk(a.get(key, _MISSING), b.get(key, _MISSING), _key_path(path, key), out, limit)
        return
    if isinstance(a, list) and isinstance(b, list):
        for index in range(max(len(a), len(b))):
            _walk(a[index] if index < len(a) else _MISSING, b[index] if index < len(b) else _MISSING,
                  f"{path}[{index}]", out, limit)
        return
    # 1 == 1.0 == True in Python, not in the canonical JSON that is hashed.
    if type(a) is not type(b) or a != b:
        out.append(path or "$")


def value_at(value: Any, path: str) -> Any:
    """The value a path from ``differing_paths`` names, or None when absent."""
    for key, index in re.findall(r'\.?([A-Za-z_][A-Za-z0-9_]*)|\[(\d+|"(?:[^"\\]|\\.)*")\]', path):
        step: Any = key or json.loads(index)
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            return None
    return value


def _pretty(value: Any) -> list[str]:
    return json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False).splitlines(keepends=True)


Names = tuple[str, str]
RECORDED_REPLAYED: Names = ("recorded", "replayed")


def _pointer(recorded: str, replayed: str, names: Names = RECORDED_REPLAYED) -> str:
    at = next(
        (i for i, (x, y) in enumerate(zip(recorded, replayed, strict=False)) if x != y),
        min(len(recorded), len(replayed)),
    )
    start = max(0, at - CONTEXT_CHARS)

    def clip(text: str) -> str:
        return json.dumps(text[start:at + CONTEXT_CHARS], ensure_ascii=False)

    return f"first difference at character {at}\n  {names[0]}: {clip(recorded)}\n  {names[1]}: {clip(replayed)}\n"


def readable_diff(path: str, recorded: Any, replayed: Any, names: Names = RECORDED_REPLAYED) -> str:
    """A unified diff of the two values at ``path``; strings are diffed by
    line, plus the character where they first differ. ``names`` label the
    two sides (two runs compared need not be a recording and its replay)."""
    old, new = f"{names[0]} {path}", f"{names[1]} {path}"
    if isinstance(recorded, str) and isinstance(replayed, str):
        lines = difflib.unified_diff(recorded.splitlines(keepends=True), replayed.splitlines(keepends=True),
                                     old, new, n=2)
        return "".join(_ended(lines)) + _pointer(recorded, replayed, names)
    lines = difflib.unified_diff(_pretty(recorded), _pretty(replayed), old, new, n=3)
    return "".join(_ended(lines))


def _ended(lines: Any) -> list[str]:
    return [line if line.endswith("\n") else line + "\n" for line in lines]


def identical(a: Any, b: Any) -> bool:
    """Equal as canonical JSON: ``==`` with the types matching at every leaf
    (``1 == 1.0 == True`` in Python). Tells equal values apart without
    building the paths ``differing_paths`` names."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(identical(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(map(identical, a, b))
    return bool(a == b)


def compare(recorded: Any, replayed: Any, names: Names = RECORDED_REPLAYED) -> tuple[tuple[str, ...], str]:
    """Differing paths (cause first) and a readable diff of the first one;
    ``((), "")`` when equal."""
    # Every replayed tool call is compared, and nearly all are equal.
    if identical(recorded, replayed):
        return (), ""
    paths = differing_paths(recorded, replayed)  # not empty: identical() agrees with the walk
    first = paths[0]
    return tuple(paths), readable_diff(first, value_at(recorded, first), value_at(replayed, first), names)
