"""Reading source bytes safely: size caps, JSON with a clear error, and zip
members read under caps on uncompressed size and compression ratio (never
trusting the sizes a zip declares, never extracting to disk)."""

from __future__ import annotations

import io
import json
import lzma
import struct
import zipfile
import zlib
from collections.abc import Iterator
from typing import IO, Any

import zstandard

from orchestrator.contract import Frozen
from orchestrator.interop.errors import SourceTooLarge, UnreadableSource

MiB = 1024 * 1024
ZIP_ZSTANDARD = 93  # APPNOTE 4.4.5; Python 3.14's zipfile writes it, 3.11's cannot read it
METHOD_NAMES = {0: "stored", 8: "deflate", 9: "deflate64", 12: "bzip2", 14: "lzma", 93: "zstd", 95: "xz", 97: "wavpack",
                98: "ppmd", 99: "AES-encrypted"}
ZIPFILE_METHODS = frozenset((zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA))
LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # signature ... name length, extra length
CHUNK = 64 * 1024
CORRUPT = (zipfile.BadZipFile, EOFError, OSError, ValueError, zlib.error, lzma.LZMAError, zstandard.ZstdError)


class ReadLimits(Frozen):
    """``max_file_bytes`` caps a source file; ``max_member_bytes`` one
    decompressed zip member and ``max_total_bytes`` all of them together;
    ``max_ratio`` the uncompressed/compressed ratio of any member."""

    max_file_bytes: int = 512 * MiB
    max_member_bytes: int = 256 * MiB
    max_total_bytes: int = 1024 * MiB
    max_ratio: float = 200.0
    max_members: int = 100_000


def parse_json(data: bytes, name: str) -> Any:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnreadableSource(f"{name}: not UTF-8 text (byte {exc.start} of {len(data)})", path=name) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data" and (lines := json_lines(text)):
            raise UnreadableSource(
                f"{name}: JSON Lines ({lines} documents, one a line), not one trajectory document: Escrow reads "
                "one trajectory a file and does not read JSON Lines (such as an evaluation's output.jsonl)",
                path=name, line=exc.lineno) from None
        ends_early = exc.msg.startswith("Unterminated string") or exc.pos >= len(text.rstrip())
        where = "ends early (truncated?)" if ends_early else f"is corrupt at line {exc.lineno} column {exc.colno}"
        raise UnreadableSource(f"{name}: JSON {where}: {exc.msg}", path=name, line=exc.lineno) from None


def json_lines(text: str) -> int:
    """How many JSON documents ``text`` holds one a line, when it is JSON
    Lines (each of its first lines a whole object); else 0."""
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        if len(lines) < 2 or not all(isinstance(json.loads(line), dict) for line in lines[:2]):
            return 0
    except json.JSONDecodeError:
        return 0
    return len(lines)


class SafeZip:
    """A zip archive in memory whose members are read under ReadLimits."""

    def __init__(self, data: bytes, name: str, limits: ReadLimits) -> None:
        self.name = name
        self.limits = limits
        self.read_total = 0
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
            infos = self.zip.infolist()
        except (zipfile.BadZipFile, EOFError, ValueError) as exc:
            raise UnreadableSource(
                f"{name}: not a readable zip archive (truncated or corrupt): {exc}", path=name
            ) from None
        if len(infos) > limits.max_members:
            raise SourceTooLarge(f"{name}: {len(infos)} zip members, over the cap of {limits.max_members}", path=name)
        self.infos = {i.filename: i for i in infos}

    def names(self) -> list[str]:
        return list(self.infos)

    def read(self, member: str) -> bytes:
        info = self.infos.get(member)
        if info is None:
            raise UnreadableSource(f"{self.name}: no member {member!r}", path=self.name, member=member)
        cap = min(self.limits.max_member_bytes, self.limits.max_total_bytes - self.read_total)
        if info.file_size > cap:
            raise SourceTooLarge(
                f"{self.name}: member {member} declares {info.file_size} bytes uncompressed, over the cap of {cap}",
                path=self.name,
                member=member,
            )
        ratio_cap = max(int(info.compress_size * self.limits.max_ratio), 64 * 1024)
        limit = min(cap, ratio_cap)
        out = bytearray()
        try:
            # Declared sizes can lie: count what actually comes out, whatever the method.
            for chunk in self._chunks(info):
                out += chunk
                if len(out) > limit:
                    raise SourceTooLarge(
                        f"{self.name}: member {member} expands past {limit} bytes"
                        f" ({info.compress_size} compressed; ratio cap {self.limits.max_ratio:g}): a zip bomb?",
                        path=self.name,
                        member=member,
                    )
        except CORRUPT as exc:
            raise UnreadableSource(
                f"{self.name}: member {member} is corrupt: {exc}", path=self.name, member=member
            ) from None
        self.read_total += len(out)
        return bytes(out)

    def _chunks(self, info: zipfile.ZipInfo) -> Iterator[bytes]:
        """The member's uncompressed bytes, a chunk at a time."""
        method = info.compress_type
        if info.flag_bits & 0x1:
            raise self._unreadable(info, "is encrypted")
        if method in ZIPFILE_METHODS:
            with self.zip.open(info) as fh:
                yield from iter(lambda: fh.read(CHUNK), b"")
            return
        if method != ZIP_ZSTANDARD:
            raise self._unreadable(info, f"uses compression method {method} ({METHOD_NAMES.get(method, 'unknown')})")
        crc = 0
        reader: IO[bytes] = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(self._raw(info)))
        with reader:
            while chunk := reader.read(CHUNK):
                crc = zlib.crc32(chunk, crc)
                yield chunk
        if crc != info.CRC:
            raise zipfile.BadZipFile(f"Bad CRC-32 for file {info.filename!r}")

    def _raw(self, info: zipfile.ZipInfo) -> bytes:
        """The member's compressed bytes, found through its local header."""
        fp = self.zip.fp
        assert fp is not None
        fp.seek(info.header_offset)
        header = fp.read(LOCAL_HEADER.size)
        if len(header) != LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"bad local header for {info.filename!r}")
        *_, name_length, extra_length = LOCAL_HEADER.unpack(header)
        fp.seek(info.header_offset + LOCAL_HEADER.size + name_length + extra_length)
        raw = fp.read(info.compress_size)
        if len(raw) != info.compress_size:
            raise EOFError(f"{info.filename!r} ends early")
        return raw

    def _unreadable(self, info: zipfile.ZipInfo, why: str) -> UnreadableSource:
        return UnreadableSource(
            f"{self.name}: member {info.filename} {why}, which Escrow cannot read", path=self.name,
            member=info.filename, method=info.compress_type,
        )

    def json(self, member: str) -> Any:
        return parse_json(self.read(member), f"{self.name}:{member}")
