"""Blobs of the private git dir read one at a time through one ``git
cat-file --batch``, and the verifier's copy streamed from them as a tar: host
memory stays bounded by the largest file however large the workspace."""

from __future__ import annotations

import tarfile
import threading
from collections.abc import Iterator, Mapping

from sandbox.errors import ExportRefused, WorkspaceError
from sandbox.export_stream import LINK, text
from sandbox.hostgit import PrivateGit
from sandbox.verifier_accept import Refusal, TextCheck
from sandbox.workspace import tar_info

# A member this large is sent as it is; smaller ones are gathered into one send.
_SEND_BYTES = 1 << 18


def _tar_header(path: str, mode: str, data: bytes) -> bytes:
    # PAX: any name length, and names that are not UTF-8 kept as their bytes.
    return tar_info(path, mode, data).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


class BlobReader:
    """One ``git cat-file --batch``: blobs read one at a time, so only the
    one being sent is in memory. Killed past its timeout."""

    def __init__(self, git: PrivateGit) -> None:
        self.proc = git.cat_file_batch()
        self._timer = threading.Timer(git.timeout_s, self.proc.kill)
        self._timer.daemon = True
        self._timer.start()

    def each(self, shas: list[str]) -> Iterator[bytes]:
        """The blobs of ``shas`` in order, one in memory at a time. The names
        are written by a thread while the blobs are read, so a repo of many
        small files pays no round trip per file."""
        stdin = self.proc.stdin
        assert stdin is not None

        def ask_all() -> None:
            try:
                stdin.write("".join(f"{sha}\n" for sha in shas).encode())
                stdin.close()
            except OSError:  # the reader was closed (killed) before all were read
                pass

        asker = threading.Thread(target=ask_all, daemon=True)
        asker.start()
        try:
            for sha in shas:
                size = self._answer(sha)
                data = self._take(size)
                self._take(1)
                yield data
        finally:
            asker.join(timeout=0)

    def scan(self, sha: str, head_bytes: int) -> tuple[int, bytes, int]:
        """The blob's size, its first ``head_bytes`` and its count of NUL
        bytes, read a chunk at a time."""
        size = self._ask(sha)
        head = self._take(min(size, head_bytes))
        nuls, left = head.count(b"\0"), size - len(head)
        while left:
            chunk = self._take(min(left, 1 << 20))
            nuls, left = nuls + chunk.count(b"\0"), left - len(chunk)
        self._take(1)
        return size, head, nuls

    def text_refusal(self, path: str, sha: str) -> Refusal | None:
        """``TextCheck`` of a blob, read a chunk at a time."""
        check, left = TextCheck(path), self._ask(sha)
        while left:
            chunk = self._take(min(left, 1 << 20))
            check.feed(chunk)
            left -= len(chunk)
        self._take(1)
        return check.result()

    def _ask(self, sha: str) -> int:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(f"{sha}\n".encode())
            stdin.flush()
        except OSError as exc:
            raise WorkspaceError(f"asking the private git dir for blob {sha} failed: {exc}") from exc
        return self._answer(sha)

    def _answer(self, sha: str) -> int:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            header = stdout.readline().split()
            if len(header) != 3 or header[1] != b"blob":
                raise WorkspaceError(f"the private git dir has no blob {sha}")
            return int(header[2])
        except (OSError, ValueError) as exc:
            raise WorkspaceError(f"reading blob {sha} from the private git dir failed: {exc}") from exc

    def _take(self, size: int) -> bytes:
        assert self.proc.stdout is not None
        try:
            data = self.proc.stdout.read(size)
        except OSError as exc:
            raise WorkspaceError(f"reading from git cat-file failed: {exc}") from exc
        if len(data) != size:
            raise WorkspaceError(f"git cat-file gave {len(data)} of {size} bytes (killed past its timeout?)")
        return data

    def close(self) -> None:
        self._timer.cancel()
        self.proc.kill()
        self.proc.wait()


def stream_archive(git: PrivateGit, entries: Mapping[bytes, tuple[str, str]], max_bytes: int,
                   first: bytes = b"") -> Iterator[bytes]:
    """A tar of ``first`` (members made elsewhere) and ``entries``
    (0644/0755/links, uid 1000, mtime 0), yielded a header or a file's
    content at a time (no copy of it is made); past ``max_bytes`` of tar it
    stops with ExportRefused."""
    if first:
        yield first
    reader = BlobReader(git)
    sent = len(first)
    pending: list[bytes] = []  # small members gathered into one send (a repo of many small files)
    held = 0
    ordered = sorted(entries.items())
    try:
        for (raw, (mode, _)), data in zip(ordered, reader.each([sha for _, (_, sha) in ordered]), strict=True):
            if mode == LINK:
                header, data = _tar_header(text(raw), mode, data), b""
            else:
                header = _tar_header(text(raw), mode, data)
            padding = b"\0" * (-len(data) % tarfile.BLOCKSIZE)
            sent += len(header) + len(data) + len(padding)
            if sent > max_bytes:
                raise ExportRefused(f"the patched workspace is larger than {max_bytes} bytes", max_bytes=max_bytes)
            if len(data) >= _SEND_BYTES:  # a large file goes as it is: never copied
                yield b"".join((*pending, header))
                pending, held = [], 0
                yield data
                yield padding
            else:
                pending += (header, data, padding)
                held += len(header) + len(data) + len(padding)
                if held >= _SEND_BYTES:
                    yield b"".join(pending)
                    pending, held = [], 0
            del data
        yield b"".join((*pending, b"\0" * (2 * tarfile.BLOCKSIZE)))  # and the end-of-archive blocks
    finally:
        reader.close()
