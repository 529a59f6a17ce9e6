"""Machine-readable text (a diff, a command's output quoted in full) printed
whole: never wrapped or cut by rich, piped or not.

Off a terminal the exact bytes are written, so ``escrow run > fix.patch``
saves the recorded patch byte for byte. On a terminal each line is one
logical line (rich neither wraps nor crops it; the terminal folds it for the
eye and a copy gets it whole), coloured by its diff role, with every control
escaped by ``printable``.
"""

from __future__ import annotations

from typing import BinaryIO

from rich.console import Console
from rich.text import Text

from orchestrator.canonical import shown_text
from orchestrator.terminal_text import printable


def _diff_style(line: str) -> str:
    if line.startswith(("+++", "---")) or line.startswith(("diff --git", "index ")):
        return "bold"
    if line.startswith("@@"):
        return "cyan"
    if line.startswith("+"):
        return "green"
    if line.startswith("-"):
        return "red"
    return ""


def diff_line(line: str) -> Text:
    """One diff line as text for a terminal: controls escaped, coloured."""
    return Text(line, style=_diff_style(line))


def print_whole(console: Console, lines: list[Text]) -> None:
    """Each line as one unbroken logical line (``soft_wrap``: no wrap, no crop)."""
    for line in lines:
        console.print(line, soft_wrap=True, highlight=False)


def print_diff(console: Console, data: bytes, raw: BinaryIO | None) -> None:
    """The diff ``data``: its exact bytes to ``raw`` when it is given (a pipe
    or a file), else its lines for a person on ``console``."""
    if raw is not None:
        raw.write(data)
        raw.flush()
        return
    print_whole(console, [diff_line(line) for line in printable(shown_text(data)).splitlines()])
