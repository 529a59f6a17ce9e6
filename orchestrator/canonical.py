"""Canonical JSON: the one byte form used for hashing, storing and replay.

Keys sorted, no insignificant whitespace, UTF-8 without escaping, except a
lone surrogate (U+D800-U+DFFF), which UTF-8 cannot carry: it is written as
its JSON escape (``\\udcff``), so any str, including one decoded from bytes
with ``surrogateescape`` (a file name that is not UTF-8), has canonical bytes
and reads back equal through ``json.loads`` (a high surrogate directly before
a low one reads back as the one character the pair encodes; pydantic's JSON
parser refuses lone surrogates altogether). Two equal values always give
equal bytes, so sha256 over them identifies a request.

Bytes that must stay exact in a JSON record (a patch) are kept by
``bytes_fields`` and read back by ``recorded_bytes``, the one decoding every
reader goes through.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from orchestrator.errors import EscrowError
from orchestrator.exit_codes import ExitCode

_SURROGATE = re.compile("[\ud800-\udfff]")


def canonical_json(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if text.isascii():  # the common case, and no surrogate can be in it
        return text
    # A raw character is only ever inside a JSON string, where its escape means the same.
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def canonical_bytes(value: Any) -> bytes:
    return canonical_json(value).encode("utf-8")


def text_bytes(text: str) -> bytes:
    """A str's UTF-8, total: a lone surrogate, which UTF-8 cannot carry,
    counts as its three bytes (``surrogatepass``), so different strs give
    different bytes. For digests and sizes of text, never to write a file."""
    return text.encode("utf-8", errors="surrogatepass")


def sha256_hex(data: bytes | str) -> str:
    """sha256 of bytes, or of a str's ``text_bytes``."""
    if isinstance(data, str):
        data = text_bytes(data)
    return hashlib.sha256(data).hexdigest()


class RecordedBytesError(EscrowError):
    """A record's bytes fields are not what ``bytes_fields`` writes (an altered
    record: ``escrow verify`` names the broken link)."""

    exit_code = ExitCode.STORE_DAMAGED


def bytes_fields(data: bytes) -> dict[str, str]:
    """``data`` as JSON fields that keep it exact: ``{"text": ...}`` when it is
    UTF-8 (as is, readable in the record); otherwise ``text`` is only for
    reading (each invalid byte shown as ``\\xNN``) and ``base64`` holds the
    bytes."""
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"text": shown_text(data), "base64": base64.b64encode(data).decode("ascii")}


def recorded_bytes(fields: Mapping[str, Any]) -> bytes:
    """The exact bytes ``bytes_fields`` recorded: ``base64`` when present,
    else the UTF-8 of ``text`` (where a surrogate escape, U+DC80-U+DCFF,
    stands for its byte, as ``surrogateescape`` decoded it)."""
    if "base64" in fields:
        try:
            return base64.b64decode(str(fields["base64"]), validate=True)
        except binascii.Error as exc:
            raise RecordedBytesError(f"the recorded base64 does not decode: {exc}") from None
    text = fields.get("text", "")
    if not isinstance(text, str):
        raise RecordedBytesError(f"the recorded text is a {type(text).__name__}, not a string")
    try:
        return text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError as exc:
        raise RecordedBytesError(f"the recorded text holds a surrogate that stands for no byte: {exc}") from None


_LONE_SURROGATE = re.compile("[\\ud800-\\udfff]")


def readable_text(text: str) -> str:
    """``text`` with each lone surrogate (a byte ``surrogateescape`` kept, or
    any other) written as ``\\xNN`` or ``\\uNNNN``: text any encoder, parser or
    terminal takes. For what is shown or sent on, never for exact bytes."""
    if _LONE_SURROGATE.search(text) is None:
        return text
    def one(match: re.Match[str]) -> str:
        code = ord(match.group())
        return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"
    return _LONE_SURROGATE.sub(one, text)


def shown_text(data: bytes) -> str:
    """``data`` decoded for reading: UTF-8, each invalid byte written ``\\xNN``.
    Not reversible: the exact bytes are ``bytes_fields``'s."""
    return data.decode("utf-8", errors="backslashreplace")
