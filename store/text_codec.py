"""The escaped form of text cells (see ``store.text_escape``), as plain
functions: no SQLAlchemy, so the light runs reader (``store.run_list``)
reads cells the way the full store does."""

from __future__ import annotations

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
