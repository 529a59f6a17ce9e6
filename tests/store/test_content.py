"""Content-addressed requests (schema 6): exact reassembly, sharing, and
tamper evidence for blobs shared between runs."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.canonical import sha256_hex
from orchestrator.contract import Message
from store import ChainBroken, Recorder, Store
from store.write import synthetic

SYSTEM = sha256_hex('{"content":"You fix code.","name":null,"role":"system","tool_call_id":null,"tool_calls":[]}')


def build(path: Path, runs: int = 3) -> list[str]:
    with Store.open(f"sqlite:///{path}") as store:
        recorder = Recorder(store)
        ids = [synthetic.record_run(recorder, turns=4, seed=seed) for seed in range(runs)]
        odd = [Message(role="user", content="NUL \x00, \u2028, é, \U0001f600, \\u0000 and \"quotes\"")]
        tx = recorder.turn(ids[0], 9)  # never committed: its calls are those in flight at a crash
        first = tx.request(synthetic.request_for(9, odd))
        tx.request(synthetic.request_for(9, odd), attempt_of=first)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return ids


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> tuple[Path, list[str]]:
    path = tmp_path_factory.mktemp("content") / "escrow.db"
    return path, build(path)


def test_requests_reassemble_to_their_recorded_bytes(shared):
    path, ids = shared
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        calls = [c for run_id in ids for c in store.calls(run_id)]
    assert len(calls) == 3 * 4 + 2
    for call in calls:
        assert sha256_hex(call.request_json) == call.request_sha256
        assert call.request().canonical() == call.request_json
    assert any("\x00" in (m.content or "") for c in calls for m in c.request().messages)


def test_each_distinct_message_and_tools_list_is_stored_once(shared):
    path, _ = shared
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM blobs WHERE sha256 = ?", (SYSTEM,)).fetchone() == (1,)
        refs = [r[0] for r in conn.execute("SELECT request_refs FROM model_calls")]
        assert all(r[0] == "" for r in conn.execute("SELECT request_json FROM model_calls"))
        bodies = [r[0] for r in conn.execute("SELECT body FROM blobs")]
    assert len({r.split('"tools":')[1] for r in refs}) == 1  # one tools list for every call of every run
    assert len(bodies) == len(set(bodies))
    # One node per distinct message list: turn 0 ([system]) is one node for all
    # three runs, turns 1-3 one each, and the retry of the extra call adds none.
    nodes = [b for b in bodies if b.startswith('{"messages":')]
    assert len(nodes) == 1 + 3 * 3 + 1


def copy(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    return dst


def broken(path: Path) -> dict[str, str]:
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        return {c.run_id: c.problem or "" for c in store.verify_all() if not c.ok}


def test_a_changed_shared_blob_is_reported_on_every_run_that_uses_it(shared, tmp_path):
    path, ids = copy(shared[0], tmp_path / "t.db"), shared[1]
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "UPDATE blobs SET body = replace(body, 'You fix code.', 'You own code.') WHERE sha256 = ?", (SYSTEM,)
        )
    found = broken(path)
    assert set(found) == set(ids)
    for problem in found.values():
        assert SYSTEM in problem and all(run_id in problem for run_id in ids)
    result = CliRunner().invoke(app, ["verify", "--all", "--db", f"sqlite:///{path}"])
    assert isinstance(result.exception, ChainBroken) and result.exception.exit_code == 1


def test_every_single_blob_cell_change_and_deletion_is_detected(shared, tmp_path):
    path = shared[0]
    with closing(sqlite3.connect(path)) as conn:
        cells = [(rowid, column, value) for rowid, sha, body in conn.execute("SELECT rowid, sha256, body FROM blobs")
                 for column, value in (("sha256", sha), ("body", body))]
    assert len(cells) > 40
    for index, (rowid, column, value) in enumerate(cells):
        target = copy(path, tmp_path / f"c{index}.db")
        with closing(sqlite3.connect(target)) as conn, conn:
            conn.execute(f"UPDATE blobs SET {column} = ? WHERE rowid = ?", (f"{value}x", rowid))
        assert broken(target), (column, value)
        target.unlink()
    for rowid, _, _ in cells[::2]:
        target = copy(path, tmp_path / f"d{rowid}.db")
        with closing(sqlite3.connect(target)) as conn, conn:
            conn.execute("DELETE FROM blobs WHERE rowid = ?", (rowid,))
        assert broken(target), rowid
        target.unlink()


def test_a_changed_reference_breaks_the_chain(shared, tmp_path):
    path = copy(shared[0], tmp_path / "r.db")
    with closing(sqlite3.connect(path)) as conn, conn:
        other = conn.execute("SELECT request_refs FROM model_calls ORDER BY rowid LIMIT 1").fetchone()[0]
        conn.execute(
            "UPDATE model_calls SET request_refs = ? WHERE rowid = (SELECT max(rowid) FROM model_calls)", (other,)
        )
    assert any("hash mismatch" in p for p in broken(path).values())


@pytest.mark.parametrize("refs", ["not json", "[]", '{"messages": 7}', '{"messages": "0000"}', ""])
def test_a_damaged_reference_column_is_reported_not_raised(shared, tmp_path, refs):
    path = copy(shared[0], tmp_path / "r.db")
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE model_calls SET request_refs = ? WHERE rowid = 1", (refs,))
    assert broken(path)


def test_reading_a_request_whose_blob_is_damaged_is_a_clear_error(shared, tmp_path):
    path = copy(shared[0], tmp_path / "b.db")
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE blobs SET body = '{not json' WHERE sha256 = ?", (SYSTEM,))
    result = CliRunner().invoke(app, ["show", shared[1][0], "--db", f"sqlite:///{path}"])
    assert result.exit_code != 0 and "cannot be reassembled" in str(result.exception)
    assert getattr(result.exception, "exit_code", None) == 1
