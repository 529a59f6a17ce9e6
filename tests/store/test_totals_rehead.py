"""A row appended to a finished run that no total sums (a teacher's score)
moves the run's chain head, so its stored totals are re-digested against the
new head in place, not recomputed; a stored totals row that does not check
against the old head is never re-digested (that would pass off an altered
figure as checked): it is recomputed from the run's rows, as before."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from store import Recorder, Store
from store.write import synthetic
from store.write.teacher_scores import CallScore
from tests.store.test_damage import code_of, invoke


def _totals(path: Path, run_id: str) -> list[tuple]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT id, own, model, engine, calls, digest FROM run_totals WHERE run_id = ? "
                            "ORDER BY id", (run_id,)).fetchall()


def _score_first_call(store: Store, run_id: str) -> None:
    call_id, turn, _ = store.answered_envelopes(run_id)[0]
    store.record_teacher_scores([CallScore(
        run_id=run_id, call_id=call_id, turn=turn, teacher_model="teacher", teacher_engine="vllm", top_k=1,
        request_sha256=call_id.ljust(64, "0"), logprobs=(-0.5,), in_top_k=(True,), duration_s=0.25)])


@pytest.fixture
def finished(tmp_path) -> tuple[Path, str]:
    path = tmp_path / "escrow.db"
    with Store.open(f"sqlite:///{path}") as store:
        run_id = synthetic.record_run(Recorder(store), turns=3, seed=31)
        synthetic.record_run(Recorder(store), turns=1, seed=32)
    return path, run_id


def test_a_score_re_digests_the_totals_in_place(finished):
    path, run_id = finished
    before = _totals(path, run_id)
    with Store.open(f"sqlite:///{path}") as store:
        _score_first_call(store, run_id)
    after = _totals(path, run_id)
    # The same rows (ids) and figures, each with a new digest: updated, not deleted and rewritten.
    assert [row[:5] for row in after] == [row[:5] for row in before]
    assert all(a[5] != b[5] for a, b in zip(after, before, strict=True))
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        assert store.verify(run_id).ok and all(c.ok for c in store.verify_all())
    assert code_of(invoke(path, "report", run_id)) == 0


@pytest.mark.parametrize("change", [
    "UPDATE run_totals SET calls = calls + 5 WHERE id = ?",                           # a figure, digest kept
    "UPDATE run_totals SET digest = CASE WHEN digest LIKE '0%' THEN '1' ELSE '0' END || substr(digest, 2) "
    "WHERE id = ?",                                                                   # the digest
    "UPDATE run_totals SET calls = 'many' WHERE id = ?",                              # a damaged cell
    "DELETE FROM run_totals WHERE id = ?",                                            # a row gone
])
def test_totals_that_do_not_check_are_recomputed_from_the_rows_never_re_digested(finished, change):
    path, run_id = finished
    before = _totals(path, run_id)
    model_row = next(row for row in before if row[2] is not None)
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(change, (model_row[0],))
    with Store.open(f"sqlite:///{path}") as store:
        _score_first_call(store, run_id)
    after = _totals(path, run_id)
    # Written again from the rows: new ids, the true figures (calls) back.
    assert {row[0] for row in after}.isdisjoint(row[0] for row in before)
    assert [row[1:5] for row in after] == [row[1:5] for row in before]
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        assert store.verify(run_id).ok
    assert code_of(invoke(path, "report", run_id)) == 0
