"""Text cells that PostgreSQL cannot hold, escaped the same way on every backend.

PostgreSQL ``text`` refuses U+0000, which a tool's output or a model's words
may contain. A cell that contains U+0000, or that starts with ``MARK``, is
stored as ``MARK`` followed by the text with ``\\`` written ``\\\\`` and U+0000
written ``\\0``; every other cell is stored as it is. Reading reverses it, so
the chain hash, computed over the text as written by the Recorder, is the one
recomputed from the text as read: a change to a stored cell that changes what
is read breaks the chain. A stored cell that starts with ``MARK`` but is not
exactly the escaped form of some text is read verbatim (never guessed at), so
its hash no longer matches. docs/SCHEMA.md documents the form.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import String, Text
from sqlalchemy.types import TypeDecorator

MARK = "\ufdd0"  # a Unicode noncharacter: valid UTF-8 and valid PostgreSQL text
NUL = "\x00"


def needs_escape(text: str) -> bool:
    return NUL in text or text.startswith(MARK)


def escape(text: str) -> str:
    if not needs_escape(text):
        return text
    return MARK + text.replace("\\", "\\\\").replace(NUL, "\\0")


def unescape(stored: str) -> str:
    """The text a stored cell holds; a malformed escaped form is returned as stored."""
    if not stored.startswith(MARK):
        return stored
    out, i, body = [], 1, stored
    while i < len(body):
        j = body.find("\\", i)
        if j < 0:
            out.append(body[i:])
            break
        out.append(body[i:j])
        code = body[j + 1 : j + 2]
        if code == "\\":
            out.append("\\")
        elif code == "0":
            out.append(NUL)
        else:
            return stored
        i = j + 2
    text = "".join(out)
    return text if escape(text) == stored else stored


class _Escaping(TypeDecorator[str]):
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        return escape(value) if isinstance(value, str) else value

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return unescape(value) if isinstance(value, str) else value

    def process_literal_param(self, value: Any, dialect: Any) -> Any:
        return escape(value) if isinstance(value, str) else value


class EscapedText(_Escaping):
    """A TEXT column whose cells go through ``escape``/``unescape``."""

    impl = Text
    cache_ok = True


class EscapedString(_Escaping):
    """A VARCHAR column (names, kinds) carrying text from outside: escaped alike."""

    impl = String
    cache_ok = True
