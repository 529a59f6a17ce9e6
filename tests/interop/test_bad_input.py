"""Bad source files end in one typed error with its exit code, and leave the
store as it was: truncated and corrupt files, a wrong --format, unknown
schema versions, zip bombs (honest and lying sizes), files over the cap."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from orchestrator.interop import FormatMismatch, ReadLimits, SourceTooLarge, UnreadableSource, UnsupportedVersion
from store.write import importer
from store.write.importer import import_file
from tests.interop.conftest import own

ESCROW = str(Path(sys.executable).with_name("escrow"))
ATIF = "atif/terminal_v1_6.json"
EVAL = "inspect/arith.eval"


def n_runs(store) -> int:
    return len(store.runs(limit=10_000))


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def rezip(source: Path, replace: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            new.writestr(info.filename, replace.pop(info.filename, old.read(info.filename)))
        for name, data in replace.items():
            new.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.99])
def test_truncated_json_is_unreadable_and_writes_nothing(store, tmp_path, cut):
    data = own(ATIF).read_bytes()
    path = write(tmp_path, "cut.json", data[: int(len(data) * cut)])
    with pytest.raises(UnreadableSource, match="ends early"):
        import_file(store, path)
    assert n_runs(store) == 0


@pytest.mark.parametrize("cut", [0.3, 0.9])
def test_truncated_eval_is_unreadable(store, tmp_path, cut):
    data = own(EVAL).read_bytes()
    with pytest.raises(UnreadableSource, match="zip|corrupt"):
        import_file(store, write(tmp_path, "cut.eval", data[: int(len(data) * cut)]))
    assert n_runs(store) == 0


def test_corrupted_eval_member_is_unreadable(store, tmp_path):
    data = bytearray(own(EVAL).read_bytes())
    with zipfile.ZipFile(own(EVAL)) as z:
        info = z.getinfo("samples/1_epoch_1.json")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for i in range(start + 20, start + 60):
        data[i] ^= 0xFF
    with pytest.raises(UnreadableSource, match="corrupt"):
        import_file(store, write(tmp_path, "flipped.eval", bytes(data)))


def test_corrupted_json_is_unreadable(store, tmp_path):
    data = own(ATIF).read_bytes().replace(b'"steps":', b'"steps" ', 1)
    with pytest.raises(UnreadableSource, match="corrupt at line"):
        import_file(store, write(tmp_path, "bad.json", data))


def test_json_lines_are_named_as_such_not_called_corrupt(store, tmp_path):
    """An evaluation's output.jsonl (OpenHands writes one instance a line)
    is refused as JSON Lines, with what to do, and nothing is written."""
    one = json.dumps(json.loads(own(ATIF).read_bytes()))
    with pytest.raises(UnreadableSource, match=r"JSON Lines \(3 documents, one a line\)") as refused:
        import_file(store, write(tmp_path, "output.jsonl", f"{one}\n{one}\n{one}\n".encode()))
    assert "corrupt" not in str(refused.value) and "does not read JSON Lines" in str(refused.value)
    assert n_runs(store) == 0
    with pytest.raises(UnreadableSource, match="corrupt at line 2"):  # a second line that is no document stays corrupt
        import_file(store, write(tmp_path, "two.json", f"{one}\n[1, 2\n".encode()))


def test_valid_json_with_a_broken_structure_is_unreadable(store, tmp_path):
    doc = json.loads(own(ATIF).read_bytes())
    doc["steps"][2]["step_id"] = 7
    with pytest.raises(UnreadableSource, match="sequential"):
        import_file(store, write(tmp_path, "renumbered.json", json.dumps(doc).encode()))


@pytest.mark.parametrize(
    "fmt, relative",
    [
        ("swe-agent", ATIF),
        ("openhands", ATIF),
        ("atif", "swe-agent/slugify_v1.traj"),
        ("mini-swe-agent", "openhands/hello_events.json"),
        ("openhands", "mini-swe-agent/slugify_v1.json"),
        ("atif", EVAL),
        ("inspect", ATIF),
    ],
)
def test_wrong_format_flag_is_refused(store, fmt, relative):
    with pytest.raises(FormatMismatch):
        import_file(store, own(relative), fmt=fmt)
    assert n_runs(store) == 0


def test_json_in_no_known_format_is_refused(store, tmp_path):
    with pytest.raises(FormatMismatch, match="any format"):
        import_file(store, write(tmp_path, "other.json", b'{"some": "other", "format": true}'))


def test_unknown_schema_versions_are_refused(store, tmp_path):
    doc = json.loads(own(ATIF).read_bytes())
    doc["schema_version"] = "ATIF-v9.0"
    with pytest.raises(UnsupportedVersion, match="ATIF-v9.0"):
        import_file(store, write(tmp_path, "v9.json", json.dumps(doc).encode()))
    mini = json.loads(own("mini-swe-agent/slugify_v1.json").read_bytes())
    mini["trajectory_format"] = "mini-swe-agent-7"
    with pytest.raises(UnsupportedVersion, match="mini-swe-agent-7"):
        import_file(store, write(tmp_path, "mini7.json", json.dumps(mini).encode()))
    with zipfile.ZipFile(own(EVAL)) as z:
        header = json.loads(z.read("header.json"))
    header["version"] = 99
    with pytest.raises(UnsupportedVersion, match="99"):
        import_file(store, write(tmp_path, "v99.eval", rezip(own(EVAL), {"header.json": json.dumps(header).encode()})))
    assert n_runs(store) == 0


def bomb(tmp_path: Path, size: int) -> Path:
    zeros = b"\0" * size
    return write(tmp_path, "bomb.eval", rezip(own(EVAL), {"samples/2_epoch_1.json": zeros}))


def test_zip_bomb_is_stopped_by_the_ratio_cap(store, tmp_path):
    path = bomb(tmp_path, 20 * 1024 * 1024)  # 20 MiB of zeros deflate to ~20 KiB
    assert path.stat().st_size < 200_000
    with pytest.raises(SourceTooLarge, match="zip bomb"):
        import_file(store, path)
    assert n_runs(store) == 0


def test_zip_bomb_with_lying_sizes_is_stopped_while_reading(store, tmp_path):
    """The central directory and local header claim 10 bytes. The declared-size
    check passes; reading stops at the declared size (then the CRC fails) or
    at the cap on real output: never a 20 MiB expansion, never a half import."""
    data = bytearray(bomb(tmp_path, 20 * 1024 * 1024).read_bytes())
    name = b"samples/2_epoch_1.json"
    local = data.find(b"PK\x03\x04" + b"\0" * 0, 0)
    while local != -1:
        if data[local + 30 : local + 30 + len(name)] == name:
            struct.pack_into("<I", data, local + 22, 10)
        local = data.find(b"PK\x03\x04", local + 4)
    central = data.find(b"PK\x01\x02")
    while central != -1:
        if data[central + 46 : central + 46 + len(name)] == name:
            struct.pack_into("<I", data, central + 24, 10)
        central = data.find(b"PK\x01\x02", central + 4)
    path = write(tmp_path, "liar.eval", bytes(data))
    with zipfile.ZipFile(path) as z:
        assert z.getinfo(name.decode()).file_size == 10
    with pytest.raises((SourceTooLarge, UnreadableSource), match="zip bomb|Bad CRC"):
        import_file(store, path)
    assert n_runs(store) == 0


def test_member_over_the_size_cap_is_refused_from_its_declared_size(store, tmp_path):
    limits = ReadLimits(max_member_bytes=1024)
    with pytest.raises(SourceTooLarge, match="declares"):
        import_file(store, own(EVAL), limits=limits)


def test_multi_gigabyte_file_is_refused_before_reading(store, tmp_path):
    path = tmp_path / "huge.json"
    with path.open("wb") as fh:
        fh.truncate(3 * 1024**3)  # sparse: no disk used, no bytes read
    with pytest.raises(SourceTooLarge, match="over the cap"):
        import_file(store, path)


def test_a_file_is_one_transaction(store, monkeypatch):
    """A failure while writing the second sample's run leaves no run of the file."""
    real = importer.trajectory_rows
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("disk gone")
        return real(*args, **kwargs)

    monkeypatch.setattr(importer, "trajectory_rows", failing)
    with pytest.raises(RuntimeError):
        import_file(store, own(EVAL))
    assert len(calls) == 2 and n_runs(store) == 0


def test_reimport_is_a_no_op_unless_again(store):
    first = import_file(store, own(ATIF))
    second = import_file(store, own(ATIF))
    assert second.skipped and second.run_ids == first.run_ids and n_runs(store) == 1
    third = import_file(store, own(ATIF), again=True)
    assert not third.skipped and set(third.run_ids).isdisjoint(first.run_ids) and n_runs(store) == 2


def test_tampering_with_the_recorded_source_hash_breaks_the_chain(store):
    run_id = import_file(store, own(ATIF)).run_ids[0]
    with store.write() as conn:
        conn.exec_driver_sql(
            "UPDATE runs SET config_json = replace(config_json, 'sha256\":\"', 'sha256\":\"0') WHERE id = ?", (run_id,)
        )
    assert not store.verify(run_id).ok


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([ESCROW, *args], capture_output=True, text=True, env={**os.environ, **env}, timeout=120)


def test_cli_exit_codes_and_messages(tmp_path, cli_env):
    env = {"ESCROW_DB_URL": cli_env, "ESCROW_HOME": str(tmp_path / "home")}
    data = own(ATIF).read_bytes()
    cut = write(tmp_path, "cut.json", data[: len(data) // 2])
    cases = [
        ((str(cut),), 12, "ends early"),
        (("--format", "swe-agent", str(own(ATIF))), 13, "looks like atif"),
        ((str(write(tmp_path, "v9.json", data.replace(b'"ATIF-v1.6"', b'"ATIF-v9.0"', 1))),), 14, "ATIF-v9.0"),
        ((str(bomb(tmp_path, 20 * 1024 * 1024)),), 15, "zip bomb"),
        (("--max-mib", "1", str(bomb(tmp_path, 20 * 1024 * 1024))), 15, "over the cap"),
        (("--format", "bogus", str(own(ATIF))), 2, "--format"),
    ]
    for args, code, words in cases:
        done = run_cli("import", *args, env=env)
        assert done.returncode == code, (args, done.stderr)
        # The message is folded to the width (80 in a pipe): read it as one line.
        assert words in " ".join(done.stderr.split()) and "Traceback" not in done.stderr, done.stderr
    ok = run_cli("import", "--json", str(own(ATIF)), env=env)
    assert ok.returncode == 0, ok.stderr
    run_id = json.loads(ok.stdout)["run_ids"][0]
    replay = run_cli("replay", run_id, env=env)
    assert replay.returncode == 11 and "cannot be replayed" in replay.stderr and "Traceback" not in replay.stderr
    for command in (
        ("show", run_id),
        ("report", run_id),
        ("export", run_id, "--format", "events-jsonl"),
        ("verify", run_id),
    ):
        done = run_cli(*command, env=env)
        assert done.returncode == 0, (command, done.stderr)


def test_a_folder_is_refused(store, tmp_path):
    with pytest.raises(FormatMismatch, match="directory"):
        import_file(store, tmp_path)


def test_one_bad_file_does_not_stop_the_others(tmp_path, cli_env):
    from typer.testing import CliRunner

    from cli.main import app

    data = own(ATIF).read_bytes()
    cut = write(tmp_path, "cut.json", data[: len(data) // 3])
    result = CliRunner().invoke(app, ["import", str(own("openhands/hello_events.json")), str(cut), str(own(ATIF))])
    assert result.exit_code == 12, result.output
    from store import Store

    with Store.open(cli_env, readonly=True, create=False) as opened:
        assert sorted(r.run.repo for r in opened.runs()) == sorted(
            [str(own("openhands/hello_events.json")), str(own(ATIF))]
        )


def test_a_batch_writes_each_good_file_once_and_no_bad_one(store, tmp_path):
    """import_files writes up to ``batch`` parsed files a transaction: a file
    that does not parse is never part of it, and the same file twice in one
    batch is imported once (the second is skipped, naming the first's runs)."""
    from store.write.importer import ImportOutcome, import_files

    data = own(ATIF).read_bytes()
    cut = write(tmp_path, "cut.json", data[: len(data) // 2])
    paths = [own(ATIF), cut, own("openhands/hello_events.json"), own(ATIF)]
    results = list(import_files(store, paths, batch=4))
    assert isinstance(results[1], UnreadableSource)
    first, _, other, again = results
    assert isinstance(first, ImportOutcome) and isinstance(other, ImportOutcome) and isinstance(again, ImportOutcome)
    assert not first.skipped and not other.skipped and again.skipped and again.run_ids == first.run_ids
    assert n_runs(store) == 2 and all(store.verify(r).ok for r in (*first.run_ids, *other.run_ids))
