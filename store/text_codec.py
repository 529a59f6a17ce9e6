"""The escaped form of text cells (see ``store.text_escape``), as plain
functions: no SQLAlchemy, so the light runs reader (``store.read.run_list``)
reads cells the way the full store does."""

from __future__ import annotations

import re

MARK = "\ufdd0"  # a Unicode noncharacter: valid UTF-8 and valid PostgreSQL text
NUL = "\x00"
# A lone surrogate has no UTF-8 form, so no driver can store it: a name or an
# output decoded from bytes with ``surrogateescape`` carries one per byte that
# was not UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")
_HEX = frozenset("0123456789abcdef")


def needs_escape(text: str) -> bool:
    return NUL in text or text.startswith(MARK) or (not text.isascii() and _SURROGATE.search(text) is not None)


def escape(text: str) -> str:
    if not needs_escape(text):
        return text
    body = text.replace("\\", "\\\\").replace(NUL, "\\0")
    return MARK + _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", body)


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
        elif code == "u" and set(digits := body[j + 2 : j + 6]) <= _HEX and len(digits) == 4:
            out.append(chr(int(digits, 16)))
            i = j + 6
            continue
        else:
            return stored
        i = j + 2
    text = "".join(out)
    return text if escape(text) == stored else stored
