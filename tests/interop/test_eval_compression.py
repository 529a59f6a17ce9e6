"""Inspect .eval members in any compression method a zip may use: zstd
(which inspect_ai writes on Python 3.14 and Python 3.11's zipfile cannot
read), bzip2 and lzma import to the same figures as deflate, under the same
caps against zip bombs; a method Escrow cannot read is exit 12 in one line."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path

import pytest
import zstandard

from orchestrator.interop import ReadLimits, SourceTooLarge, UnreadableSource
from orchestrator.interop.safe_read import ZIP_ZSTANDARD
from store.write.importer import import_file
from tests.interop.conftest import own, totals
from tests.interop.test_bad_input import n_runs, run_cli, write

EVAL = "inspect/arith.eval"


def members_of(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {name: z.read(name) for name in z.namelist()}


def with_method(members: dict[str, bytes], method: int, compress=None, declared: int | None = None) -> bytes:
    """A zip whose members are ``compress``-ed bytes under compression ``method``
    (written as stored, then the method, CRC and uncompressed size patched
    into both headers, as Python 3.11 cannot write zstd). ``declared``: the
    uncompressed size to claim instead of the true one (a lying bomb)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name, data in members.items():
            z.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 4, 8, 0, 0)), compress(data) if compress else data)
    buf = bytearray(out.getvalue())
    for name, data in members.items():
        size, crc = len(data) if declared is None else declared, zlib.crc32(data)
        for signature, method_at in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
            at = find_header(buf, signature, name)
            struct.pack_into("<H", buf, at + method_at, method)
            struct.pack_into("<L", buf, at + method_at + 6, crc)
            struct.pack_into("<L", buf, at + method_at + 14, size)
    return bytes(buf)


def find_header(buf: bytearray, signature: bytes, name: str) -> int:
    encoded, start = name.encode(), 0
    name_at = {b"PK\x03\x04": 30, b"PK\x01\x02": 46}[signature]
    length_at = {b"PK\x03\x04": 26, b"PK\x01\x02": 28}[signature]
    while True:
        at = buf.index(signature, start)
        (n,) = struct.unpack_from("<H", buf, at + length_at)
        if bytes(buf[at + name_at: at + name_at + n]) == encoded:
            return at
        start = at + 1


def zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)


def test_zstd_members_import_to_the_deflate_figures(store, tmp_path):
    deflated = own(EVAL)
    path = write(tmp_path, "zstd.eval", with_method(members_of(deflated), ZIP_ZSTANDARD, zstd))
    with zipfile.ZipFile(path) as z:
        assert {i.compress_type for i in z.infolist()} == {ZIP_ZSTANDARD}
        with pytest.raises(NotImplementedError):
            z.read(z.namelist()[0])  # what made the import crash before
    got = import_file(store, path)
    want = import_file(store, deflated)
    assert got.calls == want.calls > 0 and len(got.run_ids) == len(want.run_ids)
    assert totals(store, got.run_ids) == totals(store, want.run_ids)


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA, zipfile.ZIP_STORED])
def test_other_methods_zipfile_reads_import_too(store, tmp_path, method):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as z:
        for name, data in members_of(own(EVAL)).items():
            z.writestr(name, data)
    outcome = import_file(store, write(tmp_path, "m.eval", out.getvalue()))
    assert outcome.calls > 0


def test_a_zstd_bomb_is_stopped_by_the_ratio_cap(store, tmp_path):
    members = members_of(own(EVAL))
    members["samples/2_epoch_1.json"] = b"0" * (20 * 1024 * 1024)  # 20 MiB to about 700 bytes
    path = write(tmp_path, "bomb.eval", with_method(members, ZIP_ZSTANDARD, zstd))
    with pytest.raises(SourceTooLarge, match="zip bomb"):
        import_file(store, path)
    assert n_runs(store) == 0


def test_a_zstd_bomb_with_lying_sizes_is_stopped_while_reading(store, tmp_path):
    members = members_of(own(EVAL))
    members["samples/2_epoch_1.json"] = b"0" * (20 * 1024 * 1024)
    path = write(tmp_path, "liar.eval", with_method(members, ZIP_ZSTANDARD, zstd, declared=100))
    # The declared sizes pass the cap, and the frame's own content size is not trusted either.
    with pytest.raises(SourceTooLarge, match="zip bomb"):
        import_file(store, path, limits=ReadLimits(max_member_bytes=1024 * 1024))
    assert n_runs(store) == 0


def test_corrupt_zstd_data_is_unreadable(store, tmp_path):
    members = members_of(own(EVAL))
    path = write(tmp_path, "bad.eval", with_method(members, ZIP_ZSTANDARD, lambda d: b"\x28\xb5\x2f\xfd" + d[:40]))
    with pytest.raises(UnreadableSource, match="corrupt"):
        import_file(store, path)


def test_a_method_escrow_cannot_read_is_exit_12_as_one_message(tmp_path, cli_env):
    path = write(tmp_path, "ppmd.eval", with_method(members_of(own(EVAL)), 98))
    done = run_cli("import", str(path), env={"ESCROW_DB_URL": cli_env, "ESCROW_HOME": str(tmp_path / "home")})
    assert done.returncode == 12, done.stderr
    said = " ".join(done.stderr.split())  # one message, folded to the width
    assert "compression method 98 (ppmd)" in said and "cannot read" in said
    first, *rest = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and first.startswith("[1/1] error"), done.stderr
    assert all(line.startswith("  ") for line in rest), done.stderr  # its continuation lines only


def test_import_help_lists_the_exit_codes_the_errors_have():
    from orchestrator.exit_codes import ExitCode

    done = run_cli("import", "--help", env={"COLUMNS": "200"})
    text = " ".join(done.stdout.split())
    for code, words in ((ExitCode.SOURCE_UNREADABLE, "unreadable"), (ExitCode.SOURCE_FORMAT_MISMATCH, "wrong"),
                        (ExitCode.SOURCE_VERSION_UNSUPPORTED, "unsupported"),
                        (ExitCode.SOURCE_TOO_LARGE, "over a size cap")):
        assert f"{int(code)} {words}" in text, text
