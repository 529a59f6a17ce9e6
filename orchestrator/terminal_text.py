"""Model and tool content made safe to print on a terminal. Pure.

A terminal acts on control characters: ESC starts sequences that write the
clipboard (OSC 52), set the window title (OSC 0), hide text (SGR 8) or move the
cursor; C1 controls (U+0080-U+009F, e.g. U+009B = CSI) do the same in UTF-8;
BEL, backspace and a lone carriage return overwrite what is shown; bidi
overrides (U+202E) reorder it. ``printable`` turns every such character into a
visible escape (``\\x1b``, ``\\u202e``), so nothing but text reaches the
terminal. Every terminal output that carries model, tool or repo content goes
through it.
"""

from __future__ import annotations

import re

# Cc (C0, DEL, C1) except newline and tab; bidi embeddings, overrides and
# isolates; line and paragraph separators; lone surrogates (unprintable).
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
    "\u2028\u2029"
    "\ud800-\udfff]"
)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if char == "\r":
        return "\\r"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def printable(text: str, *, newlines: bool = True) -> str:
    """``text`` with every terminal control escaped. A CRLF line end stays a
    line end; ``newlines=False`` also escapes newlines and tabs (one-line use)."""
    text = text.replace("\r\n", "\n")
    escaped = _UNSAFE.sub(_escape, text)
    if not newlines:
        escaped = escaped.replace("\n", "\\n").replace("\t", "\\t")
    return escaped


def one_line(text: str, width: int) -> str:
    """Whitespace collapsed, controls escaped, cut to ``width`` characters."""
    flat = " ".join(printable(text).split())  # escape first: \r and \x1c-\x1f are whitespace to split()
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"


def is_printable(text: str) -> bool:
    """True when ``text`` holds no character a terminal would act on."""
    return _UNSAFE.search(text) is None
