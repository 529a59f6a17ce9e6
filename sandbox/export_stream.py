"""The host side of the workspace export: the framed stream written by
sandbox/export_script.py is parsed as pure data, every cap is checked while
reading, and file content goes straight into git as blobs (``fast-import``).

Nothing from the sandbox becomes a host path, a mode, a time or an owner:
modes are 0644 or 0755 from the exec bit, symlinks are blobs carrying their
target (and only when it stays inside the repo), and paths that git would
treat as metadata (``.git`` in any case, in any directory) are skipped.
"""

from __future__ import annotations

import json
import posixpath
import struct
import subprocess
import tempfile

from orchestrator.contract import Frozen
from sandbox.capture import StreamCapture
from sandbox.errors import ExportRefused, GitTimeout, WorkspaceError
from sandbox.hostgit import PrivateGit

MAGIC = b"ESCROW-EXPORT/1\n"
FILE, EXEC, LINK = "100644", "100755", "120000"
_SMALL = 4096  # cap on a path, a link target, a reason
_BUILD_ARTEFACTS = (b"__pycache__", b".pytest_cache")


PAGE = 4096  # a tmpfs page: the least a non-empty file takes in a copy


def copy_cost(size: int) -> int:
    """What a file of ``size`` bytes takes on the copy's tmpfs (whole pages)."""
    return -(-size // PAGE) * PAGE


class ExportLimits(Frozen):
    """Caps on what may leave a sandbox. Every entry counts, directories
    included (``max_files``); content counts as the verifier's copy will take
    it: each hard link as a whole file, in whole pages (``copy_cost``)."""

    max_files: int = 50_000
    max_file_bytes: int = 32 * 2**20
    max_total_bytes: int = 512 * 2**20
    max_patch_bytes: int = 64 * 2**20
    max_depth: int = 128

    def script_input(self) -> bytes:
        return json.dumps({"max_files": self.max_files, "max_file_bytes": self.max_file_bytes,
                           "max_depth": self.max_depth}).encode()


class Skipped(Frozen):
    path: str
    reason: str


def is_git_metadata(path: bytes) -> bool:
    """Any component git would take for ``.git`` (any case, NTFS/HFS forms)."""
    for part in path.split(b"/"):
        low = part.lower().rstrip(b". ")
        if (
            low == b".git"
            or low == b"git~1"
            or low.replace(b"\xe2\x80\x8c", b"").replace(b"\xe2\x80\x8d", b"") == b".git"
        ):
            return True
    return False


def is_build_artefact(path: bytes) -> bool:
    parts = path.split(b"/")
    return any(p in _BUILD_ARTEFACTS for p in parts[:-1]) or parts[-1] in _BUILD_ARTEFACTS or path.endswith(b".pyc")


def link_stays_inside(path: bytes, target: bytes) -> bool:
    """A symlink target that resolves (lexically) inside the repo and not into git metadata."""
    if not target or b"\0" in target or target.startswith(b"/"):
        return False
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return joined != b".." and not joined.startswith(b"../") and not is_git_metadata(joined)


def _check_path(path: bytes) -> None:
    if not path or b"\0" in path or path.startswith(b"/") or any(p in (b"", b".", b"..") for p in path.split(b"/")):
        raise ExportRefused(f"export stream carries an invalid path {path[:200]!r}")


def _quote(path: bytes) -> bytes:
    out = bytearray(b'"')
    for byte in path:
        if byte in (0x22, 0x5C):
            out += b"\\" + bytes([byte])
        elif 0x20 <= byte < 0x7F:
            out.append(byte)
        else:
            out += b"\\%03o" % byte
    return bytes(out + b'"')


def text(path: bytes) -> str:
    return path.decode("utf-8", errors="surrogateescape")


class TreeBuilder:
    """One ``git fast-import``: blobs written as data, then one commit of the tree."""

    def __init__(self, git: PrivateGit) -> None:
        self.git = git
        self.errors = tempfile.TemporaryFile()
        self.proc = git.fast_import(self.errors)
        self.entries: dict[bytes, tuple[str, str]] = {}
        self._marks = 0

    def _write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
        except OSError as exc:
            raise WorkspaceError(f"git fast-import stopped reading: {exc}") from exc

    def begin_blob(self, size: int) -> str:
        self._marks += 1
        self._write(b"blob\nmark :%d\ndata %d\n" % (self._marks, size))
        return f":{self._marks}"

    def chunk(self, data: bytes) -> None:
        self._write(data)

    def end_blob(self) -> None:
        self._write(b"\n")

    def blob(self, data: bytes) -> str:
        ref = self.begin_blob(len(data))
        self.chunk(data)
        self.end_blob()
        return ref

    def put(self, path: bytes, mode: str, ref: str) -> None:
        self.entries[path] = (mode, ref)

    def commit(self, ref_name: str) -> str:
        """Write the tree as one commit on ``ref_name``; returns its sha."""
        lines = [b"commit %s\ncommitter escrow <escrow@localhost> 0 +0000\ndata 0\ndeleteall\n" % ref_name.encode()]
        lines += [b"M %s %s %s\n" % (mode.encode(), ref.encode(), _quote(path))
                  for path, (mode, ref) in sorted(self.entries.items())]
        self._write(b"".join(lines) + b"\ndone\n")
        self.close()
        return self.git.run("rev-parse", "--verify", ref_name).stdout.decode().strip()

    def close(self) -> None:
        """Finish (or abort) fast-import; raises if it failed or timed out."""
        try:
            self._finish()
        finally:
            self.errors.close()

    def _finish(self) -> None:
        proc = self.proc
        if proc.returncode is not None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        try:
            code = proc.wait(timeout=self.git.timeout_s)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.wait()
            raise GitTimeout(f"git fast-import ran past {self.git.timeout_s:g}s and was killed") from exc
        if code != 0:
            self.errors.seek(0)
            raise WorkspaceError(f"git fast-import failed: {self.errors.read(4096).decode(errors='replace')[:500]}")

    def abort(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            self.proc.wait()
        self.errors.close()


class ExportParser(StreamCapture):
    """The stdout sink of the export exec: parses records as they arrive and
    feeds ``tree``; raises ExportRefused at the first broken cap or malformed byte."""

    def __init__(self, limits: ExportLimits, tree: TreeBuilder) -> None:
        super().__init__(256)
        self.limits = limits
        self.tree = tree
        self.limit = limits.max_total_bytes + limits.max_files * 64  # the exec's own flood ceiling
        self.skipped: list[Skipped] = []
        self.records = 0
        self.content_bytes = 0
        self.copy_bytes = 0  # what the content takes in the verifier's copy
        self.ended = False
        self._blobs: dict[bytes, tuple[str, str]] = {}
        self._sizes: dict[bytes, int] = {}
        self._seen: set[bytes] = set()
        self._buf = bytearray()
        self._magic = False
        self._pending: tuple[bytes, bytes, int] | None = None  # kind, path, bytes left of streamed content
        self._keep = False

    def feed(self, chunk: bytes) -> None:
        super().feed(chunk)
        self._buf += chunk
        while self._step():
            pass

    def _step(self) -> bool:
        buf = self._buf
        if not self._magic:
            if len(buf) < len(MAGIC):
                return False
            if bytes(buf[: len(MAGIC)]) != MAGIC:
                raise ExportRefused("export stream does not start with the expected header")
            del buf[: len(MAGIC)]
            self._magic = True
            return True
        if self._pending is not None:
            return self._stream_content()
        if not buf:
            return False
        if self.ended:
            raise ExportRefused("export stream carries data after its end record")
        if len(buf) < 5:
            return False
        kind = bytes(buf[:1])
        (plen,) = struct.unpack(">I", buf[1:5])
        if kind not in (b"F", b"X", b"H", b"L", b"S", b"D", b"E") or plen > _SMALL:
            raise ExportRefused(f"export stream record is malformed (kind {kind!r}, path length {plen})")
        if len(buf) < 13 + plen:
            return False
        path = bytes(buf[5 : 5 + plen])
        (dlen,) = struct.unpack(">Q", buf[5 + plen : 13 + plen])
        if kind in (b"F", b"X"):
            self._start_content(kind, path, dlen)
            del buf[: 13 + plen]
            return True
        if dlen > _SMALL:
            raise ExportRefused(f"export stream record {path[:200]!r} carries {dlen} bytes of metadata")
        if len(buf) < 13 + plen + dlen:
            return False
        data = bytes(buf[13 + plen : 13 + plen + dlen])
        del buf[: 13 + plen + dlen]
        self._record(kind, path, data)
        return True

    def _count(self, path: bytes) -> None:
        _check_path(path)
        self.records += 1
        if self.records > self.limits.max_files:
            raise ExportRefused(
                f"the workspace has more than {self.limits.max_files} files and directories",
                max_files=self.limits.max_files,
            )
        if path in self._seen:
            raise ExportRefused(f"export stream names {path[:200]!r} twice")
        self._seen.add(path)

    def _start_content(self, kind: bytes, path: bytes, size: int) -> None:
        self._count(path)
        if size > self.limits.max_file_bytes:
            raise ExportRefused(f"{text(path)} is larger than the per-file cap ({self.limits.max_file_bytes} bytes)")
        self.content_bytes += size
        if self.content_bytes > self.limits.max_total_bytes:
            raise ExportRefused(f"the workspace holds more than {self.limits.max_total_bytes} bytes of content",
                                max_total_bytes=self.limits.max_total_bytes)
        self._add_copy_cost(size)
        self._sizes[path] = size
        ref = self.tree.begin_blob(size)
        mode = EXEC if kind == b"X" else FILE
        self._blobs[path] = (mode, ref)
        self._keep = not (is_git_metadata(path) or is_build_artefact(path))
        if not self._keep and not is_build_artefact(path):
            self.skipped.append(Skipped(path=text(path), reason="git metadata is never exported"))
        self._pending = (kind, path, size)
        if self._keep:
            self.tree.put(path, mode, ref)

    def _add_copy_cost(self, size: int) -> None:
        self.copy_bytes += copy_cost(size)
        if self.copy_bytes > self.limits.max_total_bytes:
            raise ExportRefused(
                f"the workspace holds more than {self.limits.max_total_bytes} bytes of content as the verifier's "
                f"copy takes it (each hard link a whole file, each file whole {PAGE}-byte pages)",
                max_total_bytes=self.limits.max_total_bytes)

    def _stream_content(self) -> bool:
        assert self._pending is not None
        kind, path, left = self._pending
        if left and not self._buf:
            return False
        take = bytes(self._buf[:left])
        del self._buf[: len(take)]
        self.tree.chunk(take)
        left -= len(take)
        if left:
            self._pending = (kind, path, left)
            return False
        self.tree.end_blob()
        self._pending = None
        return True

    def _record(self, kind: bytes, path: bytes, data: bytes) -> None:
        if kind == b"E":
            if path or data != str(self.records).encode():
                raise ExportRefused("export stream end record does not match its records")
            self.ended = True
            return
        self._count(path)
        if is_git_metadata(path):
            self.skipped.append(Skipped(path=text(path), reason="git metadata is never exported"))
        elif kind == b"S":
            self.skipped.append(Skipped(path=text(path), reason=data.decode("utf-8", errors="replace")))
        elif kind == b"L":
            if link_stays_inside(path, data):
                self.tree.put(path, LINK, self.tree.blob(data))
            else:
                self.skipped.append(
                    Skipped(path=text(path), reason=f"symlink to {text(data)!r} points outside the repo")
                )
        elif kind == b"D":
            return  # a directory: counted, never in the tree (git holds no empty ones)
        else:  # H: the same content as an earlier file, sent once, a whole file again in the copy
            if data not in self._blobs:
                raise ExportRefused(f"hard link {path[:200]!r} refers to content not exported before it")
            self._add_copy_cost(self._sizes[data])
            if not is_build_artefact(path):
                self.tree.put(path, *self._blobs[data])

    def finish(self) -> None:
        if not self.ended or self._pending is not None or self._buf:
            raise ExportRefused("the export stream ended early (the export was interrupted)")
