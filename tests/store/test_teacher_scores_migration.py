"""Migration 14 adds the teacher's top K (``teacher_scores.top_json``) to a
schema-13 store: the score rows already written keep NULL there, which the
chain does not hash, so every chain still verifies and keeps its head; a
score written after the upgrade carries its top K under its link."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from store import Recorder, Store
from store.schema.migrations import LATEST
from store.write import synthetic
from store.write.teacher_scores import CallScore


def score(run_id: str, call: tuple[str, int | None, object], sha: str,
          top: tuple[tuple[tuple[int, float], ...], ...] | None = None) -> CallScore:
    call_id, turn, _ = call
    return CallScore(run_id=run_id, call_id=call_id, turn=turn, teacher_model="teacher", teacher_engine="vllm",
                     top_k=2, request_sha256=sha * 64, logprobs=(-0.5,), in_top_k=(True,), top=top, duration_s=0.5)


def as_schema_13(path: Path) -> None:
    """What a schema-13 store holds: score rows without ``top_json``, no stamp 14."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("ALTER TABLE teacher_scores DROP COLUMN top_json")
        conn.execute("DELETE FROM escrow_migrations WHERE version > 13")
        conn.commit()


def heads(path: Path) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT id, chain_seq, chain_head FROM runs ORDER BY id").fetchall()


def test_a_schema_13_store_with_teacher_scores_migrates_and_verifies(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    url = f"sqlite:///{path}"
    with Store.open(url) as store:
        run_id = synthetic.record_run(Recorder(store), turns=2, seed=5)
        first, second = store.answered_envelopes(run_id)[:2]
        store.record_teacher_scores([score(run_id, first, "1")])  # as schema 13 wrote it: no top K
    as_schema_13(path)
    chains = heads(path)
    with closing(sqlite3.connect(path)) as conn:
        assert "top_json" not in {r[1] for r in conn.execute("PRAGMA table_info(teacher_scores)")}
    with Store.open(url) as store:  # a write-open upgrades
        assert store.schema_version == LATEST == 14
        assert all(c.ok for c in store.verify_all())
        (old,) = store.teacher_scores(run_id)
        assert old["top"] is None and old["logprobs"] == [-0.5]
    assert heads(path) == chains
    with Store.open(url) as store:
        store.record_teacher_scores([score(run_id, second, "2", top=(((7, -0.5), (3, float("-inf"))),))])
        assert store.verify(run_id).ok
        assert [r["top"] for r in store.teacher_scores(run_id)] == [None, [[[7, -0.5], [3, None]]]]
    assert heads(path)[0][1] == chains[0][1] + 1  # the old rows' links kept; one row appended
