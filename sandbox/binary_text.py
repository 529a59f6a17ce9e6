"""Files the patch adds or changes that git diffs as binary though they look
like text: a base85 blob hides from whoever reads the patch what the file
does (a NUL in pytest.ini). Each is flagged, read in chunks, never whole."""

from __future__ import annotations

from collections.abc import Mapping

from policies import Flag, FlagReason
from sandbox.export_stream import text
from sandbox.git_blobs import BlobReader
from sandbox.hostgit import PrivateGit

# Names that say "text": such a file that diffs as binary hides what it does
# from whoever reads the patch (a NUL in pytest.ini makes a base85 blob).
_TEXT_SUFFIXES = (".py", ".pyi", ".pyw", ".txt", ".md", ".rst", ".ini", ".cfg", ".toml", ".json", ".yml", ".yaml",
                  ".sh", ".bash", ".c", ".h", ".cc", ".cpp", ".js", ".ts", ".html", ".css", ".csv", ".xml", ".in")
_GIT_BINARY_PROBE = 8000  # git calls a file binary when a NUL is among its first 8000 bytes


def describe_binary_text(path: str, size: int, head: bytes, nuls: int) -> str | None:
    """Why a file diffs as binary though it looks like text, or None (it is
    not binary to git, or it does not look like text). ``head`` is its first
    bytes, ``nuls`` its count of NUL bytes."""
    head = head[:_GIT_BINARY_PROBE]
    nul = head.find(b"\0")
    if nul < 0:
        return None
    rest = head.replace(b"\0", b"")
    printable = sum(1 for b in rest if b in (9, 10, 13) or 32 <= b < 127 or b >= 128)
    looks_text = path.lower().endswith(_TEXT_SUFFIXES) or (rest and printable / len(rest) >= 0.95)
    if not looks_text:
        return None
    return (f"{size:,} bytes; diffs as binary because of {nuls:,} NUL byte(s), the first at offset {nul}; "
            "git shows it as a base85 blob, not as lines")


def binary_text_flags(git: PrivateGit, base: str, after: str,
                      after_entries: Mapping[bytes, tuple[str, str]]) -> tuple[Flag, ...]:
    """A flag for each file the patch adds or changes that git diffs as binary
    though it looks like text (each read in chunks, never whole)."""
    numstat = git.run("diff", "--no-renames", "--no-ext-diff", "--no-textconv", "--numstat", "-z", base, after,
                      "--").stdout
    binary = [rec.partition(b"\t")[2].partition(b"\t")[2] for rec in numstat.split(b"\0") if rec.startswith(b"-\t")]
    if not binary:
        return ()
    flags = []
    reader = BlobReader(git)
    try:
        for raw in binary:
            entry = after_entries.get(raw)
            if entry is None:  # deleted
                continue
            size, head, nuls = reader.scan(entry[1], _GIT_BINARY_PROBE)
            if (detail := describe_binary_text(text(raw), size, head, nuls)) is not None:
                flags.append(Flag(path=text(raw), reason=FlagReason.BINARY_TEXT.value, detail=detail))
    finally:
        reader.close()
    return tuple(flags)
