"""Text cells that PostgreSQL cannot hold, escaped the same way on every backend.

PostgreSQL ``text`` refuses U+0000, which a tool's output or a model's words
may contain, and no driver stores a lone surrogate (U+D800-U+DFFF), which a
name or an output decoded from bytes with ``surrogateescape`` holds for each
byte that was not UTF-8. A cell that contains either, or that starts with
``MARK``, is stored as ``MARK`` followed by the text with ``\\`` written
``\\\\``, U+0000 written ``\\0`` and a lone surrogate written ``\\u`` and its
four lower-case hex digits (``\\udcff``); every other cell is stored as it
is. Reading reverses it, so the chain hash, computed over the text as written
by the Recorder, is the one recomputed from the text as read: a change to a
stored cell that changes what is read breaks the chain. A stored cell that
starts with ``MARK`` but is not exactly the escaped form of some text is read
verbatim (never guessed at), so its hash no longer matches. docs/SCHEMA.md
documents the form.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import String, Text
from sqlalchemy.types import TypeDecorator

from store.text_codec import MARK, escape, unescape

__all__ = ["MARK", "EscapedString", "EscapedText", "escape", "unescape"]

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
