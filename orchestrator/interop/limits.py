"""Reading source bytes safely: size caps, JSON with a clear error, and zip
members read under caps on uncompressed size and compression ratio (never
trusting the sizes a zip declares, never extracting to disk)."""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from typing import Any

from orchestrator.contract import Frozen
from orchestrator.interop.errors import SourceTooLarge, UnreadableSource

MiB = 1024 * 1024


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
        ends_early = exc.msg.startswith("Unterminated string") or exc.pos >= len(text.rstrip())
        where = "ends early (truncated?)" if ends_early else f"is corrupt at line {exc.lineno} column {exc.colno}"
        raise UnreadableSource(f"{name}: JSON {where}: {exc.msg}", path=name, line=exc.lineno) from None


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
        out = bytearray()
        try:
            with self.zip.open(info) as fh:
                # Declared sizes can lie: count what actually comes out.
                while chunk := fh.read(64 * 1024):
                    out += chunk
                    if len(out) > cap or len(out) > ratio_cap:
                        raise SourceTooLarge(
                            f"{self.name}: member {member} expands past {min(cap, ratio_cap)} bytes"
                            f" ({info.compress_size} compressed; ratio cap {self.limits.max_ratio:g}): a zip bomb?",
                            path=self.name,
                            member=member,
                        )
        except (zipfile.BadZipFile, EOFError, OSError, ValueError, zlib.error) as exc:
            raise UnreadableSource(
                f"{self.name}: member {member} is corrupt: {exc}", path=self.name, member=member
            ) from None
        self.read_total += len(out)
        return bytes(out)

    def json(self, member: str) -> Any:
        return parse_json(self.read(member), f"{self.name}:{member}")
