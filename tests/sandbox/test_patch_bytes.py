"""A patch over any bytes, without Docker: contents and names that are not
UTF-8 go through the real export parser, the private git and ``diff_patch``;
the patch's record goes through a real store (SQLite and PostgreSQL) and
its chain; ``Patch.from_record`` gives back exactly git's bytes, and
``apply_patch`` writes every file byte for byte."""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.canonical import RecordedBytesError, canonical_json, recorded_bytes, sha256_hex
from sandbox.errors import ApplyRefused
from sandbox.export_stream import MAGIC, ExportLimits, ExportParser, TreeBuilder
from sandbox.hostgit import PrivateGit
from sandbox.workspace import Patch, apply_patch, commit_export, diff_patch, snapshot
from store import Recorder, Store
from tests.store.test_postgres import postgres_url  # noqa: F401 - the throwaway cluster

LATIN1 = "caf\xe9 cr\xe8me\n".encode("latin-1")
BEFORE = {b"notes.txt": LATIN1, b"dos.txt": b"one\r\ntwo\r\n", b"caf\xff.txt": b"old\n", b"\\udcff.py": b"# t\n"}
AFTER = {
    b"notes.txt": LATIN1 + b"cr\xe8me\n",
    b"dos.txt": b"one\r\nTWO\r\nthree\rfour\n",
    b"caf\xff.txt": b"new \xff\n",
    b"\\udcff.py": b"# t\nd\n",
    b"bad.txt": b"\xff\xfe ok \xc3( \xed\xa0\x80\n",
    b"blob.bin": b"a\x00b\xff\n\x00",
    b"\xff.txt": b"a",
    b"\xed\xb3\xbf.txt": b"b",
    b"\\udcff.txt": b"c",
    b"d\xfe/\xff": b"y",
}


def frame(kind: bytes, path: bytes, data: bytes = b"") -> bytes:
    return kind + struct.pack(">I", len(path)) + path + struct.pack(">Q", len(data)) + data


def export_stream(files: dict[bytes, bytes]) -> bytes:
    """An export as the in-container script writes it."""
    records = [frame(b"F", name, data) for name, data in files.items()]
    return MAGIC + b"".join(records) + frame(b"E", b"", str(len(records)).encode())


def write_tree(root: Path, files: dict[bytes, bytes]) -> Path:
    for name, data in files.items():
        path = root / os.fsdecode(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def read_tree(root: Path) -> dict[bytes, bytes]:
    found = {}
    for dirpath, _, names in os.walk(os.fsencode(root)):
        for name in names:
            full = os.path.join(dirpath, name)
            found[os.path.relpath(full, os.fsencode(root))] = Path(os.fsdecode(full)).read_bytes()
    return found


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "repo", BEFORE)


def exported_patch(state: Path, repo: Path, files: dict[bytes, bytes]) -> Patch:
    """The patch from ``repo`` to a workspace exported as ``files``."""
    git = PrivateGit(state).init()
    _, base = snapshot(repo, git, 2**20)
    tree = TreeBuilder(git)
    parser = ExportParser(ExportLimits(), tree)
    try:
        parser.feed(export_stream(files))
        after = commit_export(parser, git, base, "refs/heads/after")
    finally:
        tree.abort()
    return diff_patch(git, base, after, tuple(parser.skipped), ExportLimits())


@pytest.fixture
def patch(tmp_path: Path, repo: Path) -> Patch:
    return exported_patch(tmp_path / "state", repo, AFTER)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 'e.db'}"
    with Store.open(url) as opened:
        yield opened


def test_the_patch_is_gits_bytes_and_its_record_keeps_them(patch: Patch) -> None:
    data = patch.data
    assert sha256_hex(data) == patch.sha256
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")  # the case this is about: git's diff is not UTF-8
    assert b'"a/caf\\377.txt"' in data and b"+cr\xe8me" in data and b"GIT binary patch" in data
    assert {os.fsencode(f) for f in patch.files} == set(AFTER)
    record = json.loads(canonical_json(patch.record()))  # as the store keeps it
    assert record["base64"] and "\\xe8" in record["text"]  # the text is for reading only
    assert recorded_bytes(record) == data
    assert Patch.from_record(record) == patch.model_copy(update={"tree": ""})


def test_a_utf8_patch_is_recorded_as_text_alone(tmp_path: Path) -> None:
    repo = write_tree(tmp_path / "plain", {b"a.txt": "caf\u00e9\n".encode()})
    record = exported_patch(tmp_path / "state", repo, {b"a.txt": "th\u00e9\n".encode()}).record()
    assert "base64" not in record and "+th\u00e9" in str(record["text"])


def test_the_patch_read_back_from_the_store_applies_byte_for_byte(patch: Patch, repo: Path, store: Store,
                                                                  tmp_path: Path) -> None:
    recorder = Recorder(store)
    run_id = recorder.start_run(task="t", repo=str(repo), model="m", config={}, policy={})
    recorder.record_event(run_id, None, "patch", {**patch.record(), "verified": True})
    recorder.finish_run(run_id, "PASS", "ok", extra={"patch_sha256": patch.sha256})
    assert store.verify(run_id).ok
    (event,) = store.events(run_id, "patch")
    stored = Patch.from_record(event.data)
    assert stored.data == patch.data and stored.files == patch.files

    target = shutil.copytree(repo, tmp_path / "target")
    apply_patch(stored, target, expected_sha256=patch.sha256)
    assert read_tree(target) == {**BEFORE, **AFTER}


def test_a_patch_whose_recorded_bytes_were_altered_is_refused(patch: Patch, repo: Path) -> None:
    record = json.loads(canonical_json(patch.record()))
    altered = {**record, "base64": record["base64"][:-8] + "AAAAAAA="}
    with pytest.raises(RecordedBytesError):
        Patch.from_record(altered)
    with pytest.raises(RecordedBytesError):
        Patch.from_record({**record, "base64": "not base64!"})
    surrogate_text = patch.model_copy(update={"text": patch.text.replace("cr\udce8me", "cr\udce9me")})
    with pytest.raises(ApplyRefused):
        apply_patch(surrogate_text, repo, expected_sha256=patch.sha256)
    assert read_tree(repo) == BEFORE
