"""No module of the project over 400 lines unless its docstring says why, on
a line starting "Over 400 lines:": past that, a module holds more than one
concern, and a reader must keep them apart by hand."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("orchestrator", "sandbox", "store", "policies", "cli", "bench", "scripts")
MAX_LINES = 400
REASON = "Over 400 lines:"


def oversized(root: Path) -> list[str]:
    """The modules under ``root``'s checked folders over ``MAX_LINES``
    lines whose docstring gives no reason, each with its count."""
    found = []
    for folder in CHECKED:
        for path in sorted((root / folder).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            lines = len(source.splitlines())
            if lines <= MAX_LINES:
                continue
            docstring = ast.get_docstring(ast.parse(source)) or ""
            if not any(line.startswith(REASON) for line in docstring.splitlines()):
                found.append(f"{path.relative_to(root)}: {lines} lines")
    return found


def test_no_module_is_over_400_lines_without_saying_why():
    assert oversized(ROOT) == []


def test_a_long_module_is_found_unless_its_docstring_says_why(tmp_path):
    """The check itself, on a tree of its own."""
    (tmp_path / "sandbox").mkdir()
    body = "x = 1\n" * MAX_LINES
    (tmp_path / "sandbox" / "short.py").write_text('"""Short."""\n' + "x = 1\n" * (MAX_LINES - 1))
    (tmp_path / "sandbox" / "long.py").write_text('"""Long."""\n' + body)
    (tmp_path / "sandbox" / "said.py").write_text(f'"""Long.\n\n{REASON} one script, sent whole.\n"""\n' + body)
    (tmp_path / "sandbox" / "in_code.py").write_text(f'"""Long."""\n# {REASON} a comment is no reason\n' + body)
    assert oversized(tmp_path) == ["sandbox/in_code.py: 402 lines", "sandbox/long.py: 401 lines"]
