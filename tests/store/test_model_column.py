"""Schema 7: the call's model copied onto responses and attempts. The copy is
outside the hashed form yet checked against its call; migration 7 backfills
it resumably, and old chains stay valid."""

from __future__ import annotations

import random
import signal
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from store import Recorder, Store
from store.schema.migrations import LATEST
from store.write import synthetic
from tests.store.killed_upgrade import killed_upgrade

COPY = '"gen_ai.request.model"'
TABLES = ("model_responses", "call_attempts")
INDEXES = ("ix_model_responses_run_model", "ix_call_attempts_run_model")


def recorded(path: Path, runs: int = 4) -> list[str]:
    """Runs whose calls ask for different models, with one or two HTTP attempts a call."""
    ids = []
    with Store.open(f"sqlite:///{path}") as store:
        recorder = Recorder(store)
        for i in range(runs):
            rng, model = random.Random(i), synthetic.MODELS[i % 3]
            run_id = synthetic.start(recorder, rng, model=model)
            for turn in range(3):
                with recorder.turn(run_id, turn) as tx:
                    call_id = tx.request(synthetic.request_for(turn, [], model=model))
                    tx.envelope(call_id, synthetic.envelope_for(rng, turn, ()))
            recorder.finish_run(run_id, "PASS", "", turn=3)
            ids.append(run_id)
    return ids


def as_schema_6(path: Path) -> None:
    """What a schema-6 store holds: no copies (NULL, as just added), no v7 indexes, no stamp."""
    with closing(sqlite3.connect(path)) as conn:
        for table in TABLES:
            conn.execute(f"UPDATE {table} SET {COPY} = NULL")
        for index in INDEXES:
            conn.execute(f"DROP INDEX {index}")
        conn.execute("DELETE FROM escrow_migrations WHERE version >= 7")
        conn.execute("DROP TABLE run_totals")  # schema 8
        conn.execute("DROP TABLE run_ttfts")
        conn.execute("DROP TABLE ttft_days")  # schema 9
        conn.commit()


def copies(path: Path) -> list[tuple[object, object]]:
    with closing(sqlite3.connect(path)) as conn:
        return [row for table in TABLES for row in conn.execute(
            f"SELECT t.{COPY}, c.{COPY} FROM {table} t JOIN model_calls c ON c.id = t.call_id")]


def test_new_rows_carry_their_calls_model(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    recorded(path)
    pairs = copies(path)
    assert pairs and all(copy == call for copy, call in pairs)
    assert len({call for _, call in pairs}) == 3


@pytest.mark.parametrize("value", ["'qwen3-0.6b'", "NULL", "'gemma-3-270m '"], ids=["other model", "null", "near miss"])
@pytest.mark.parametrize("table", TABLES)
def test_a_changed_copy_fails_verify(tmp_path: Path, table: str, value: str) -> None:
    path = tmp_path / "e.db"
    ids = recorded(path)
    with closing(sqlite3.connect(path)) as conn:
        (row_id,) = conn.execute(
            f"SELECT id FROM {table} WHERE run_id = ? AND {COPY} != 'qwen3-0.6b' ORDER BY seq LIMIT 1", (ids[0],)
        ).fetchone()
        conn.execute(f"UPDATE {table} SET {COPY} = {value} WHERE id = ?", (row_id,))
        conn.commit()
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        checks = {c.run_id: c for c in store.verify_all()}
    assert not checks[ids[0]].ok and checks[ids[0]].table == table and checks[ids[0]].row_id == row_id
    assert "requested" in (checks[ids[0]].problem or "")
    assert all(checks[i].ok for i in ids[1:])




@pytest.mark.parametrize("kill_at", [2, 5, 9])
def test_the_backfill_resumes_after_sigkill(tmp_path: Path, kill_at: int) -> None:
    """Killed after a number of committed transactions (the first adds the
    columns, then batches of 3 rows); the next write-open completes it."""
    path = tmp_path / "e.db"
    ids = recorded(path)
    as_schema_6(path)
    url = f"sqlite:///{path}"
    done = killed_upgrade(url, kill_at, 6, ("store.schema.migrations", "MODEL_COPY_BATCH_ROWS", 3))
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT max(version) FROM escrow_migrations").fetchone()[0] == 6
    pairs = copies(path)
    filled = [p for p in pairs if p[0] is not None]
    assert all(copy == call for copy, call in filled)
    assert len(filled) < len(pairs), "killed before the end"
    with Store.open(url) as store:  # a write-open resumes the upgrade
        assert store.schema_version == LATEST
        assert all(c.ok for c in store.verify_all()) and len(store.verify_all()) == len(ids)
    assert all(copy == call for copy, call in copies(path))
    with closing(sqlite3.connect(path)) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert set(INDEXES) <= names


def test_the_chain_heads_are_unchanged_by_the_migration(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    recorded(path)
    as_schema_6(path)
    with closing(sqlite3.connect(path)) as conn:
        before = conn.execute("SELECT id, chain_head FROM runs ORDER BY id").fetchall()
        hashes = conn.execute("SELECT id, chain_hash FROM model_responses ORDER BY id").fetchall()
    with Store.open(f"sqlite:///{path}") as store:
        assert all(c.ok for c in store.verify_all())
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT id, chain_head FROM runs ORDER BY id").fetchall() == before
        assert conn.execute("SELECT id, chain_hash FROM model_responses ORDER BY id").fetchall() == hashes
