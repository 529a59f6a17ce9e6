"""``escrow verify`` recomputes every stored totals digest (docs/SCHEMA.md),
and ``escrow report RUN`` checks its run's the same way: one hex digit of
``run_totals.digest`` changed, on any row of the run, is named by both, as
every aggregate report already refuses it."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from store import Recorder, Store
from store.errors import RollupMismatch
from store.write import synthetic
from tests.store.test_damage import code_of, invoke

DAMAGED, FINDING = 4, 1


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, str, list[int]]:
    path = tmp_path_factory.mktemp("digests") / "escrow.db"
    with Store.open(f"sqlite:///{path}") as store:
        recorder = Recorder(store)
        run_id = synthetic.record_run(recorder, turns=3, seed=5)
        synthetic.record_run(recorder, turns=2, seed=6)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        ids = [r[0] for r in conn.execute("SELECT id FROM run_totals WHERE run_id = ? ORDER BY id", (run_id,))]
    assert len(ids) >= 2  # a model row and the tool seconds row at least
    return path, run_id, ids


def flipped(digest: str) -> str:
    return ("0" if digest[0] != "0" else "1") + digest[1:]


def test_the_pristine_store_verifies_and_reports(pristine):
    path, run_id, _ = pristine
    assert code_of(invoke(path, "verify", "--all")) == 0
    assert code_of(invoke(path, "report", run_id)) == 0


@pytest.mark.parametrize("index", [0, 1, -1])
def test_one_changed_digit_of_a_stored_digest_is_named(pristine, tmp_path, index):
    path, run_id, ids = pristine
    row_id = ids[index]
    copy = tmp_path / "copy.db"
    shutil.copyfile(path, copy)
    with closing(sqlite3.connect(copy)) as conn, conn:
        (digest,) = conn.execute("SELECT digest FROM run_totals WHERE id = ?", (row_id,)).fetchone()
        conn.execute("UPDATE run_totals SET digest = ? WHERE id = ?", (flipped(digest), row_id))
    with Store.open(f"sqlite:///{copy}", readonly=True) as store:
        check = store.verify(run_id)
        assert not check.ok and check.table == "run_totals", check
        assert f"run_totals row {row_id}" in check.problem and "digest" in check.problem, check.problem
        assert [c.run_id for c in store.verify_all() if not c.ok] == [run_id]
    for args in (("verify", run_id), ("verify", "--all")):
        result = invoke(copy, *args)
        assert code_of(result) == FINDING, (args, result.output)
        assert run_id in result.output and "digest" in result.output, (args, result.output)
    result = invoke(copy, "report", run_id)
    assert code_of(result) == DAMAGED, result.output
    assert isinstance(result.exception, RollupMismatch) and result.exception.run_ids == [run_id]
