"""``escrow report --by batch`` checks each run's batch and task against the
run's own chained record: a batch run's config (in its genesis event) names
its batch and task, so a batch table edited behind the store's back (an
attempt's ``run_id``, ``batch_id`` or ``task_id``) is refused with exit 4
naming the runs, never summed into another group with exit 0."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from store import Recorder, Store
from store.errors import BatchAttributionMismatch
from store.write import batches as bstore
from store.write import synthetic

DAMAGED = 4


def batch_run(recorder: Recorder, batch_id: str, task_id: str, seed: int) -> str:
    """A run as a batch attempt records it: the attempt notes the run, the run's config names the attempt's task."""
    store = recorder.store
    assert isinstance(store, Store)  # a Recorder writes through any Writable; this one is a store
    attempt = bstore.start_attempt(store, batch_id, task_id)
    run_id = synthetic.record_run(recorder, turns=2, seed=seed, config={"batch": bstore.batch_note(batch_id, task_id)})
    bstore.finish_attempt(store, attempt, outcome=bstore.MODEL, run_id=run_id, verdict="PASS")
    return run_id


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("attribution") / "escrow.db"
    with Store.open(f"sqlite:///{path}") as store:
        recorder = Recorder(store)
        first = bstore.create_batch(store, task_file="a.jsonl", tasks={"a": (1, {}), "b": (2, {})}, settings={})
        second = bstore.create_batch(store, task_file="b.jsonl", tasks={"a": (1, {})}, settings={})
        ids = {"first": first, "second": second,
               "a1": batch_run(recorder, first, "a", 1), "b1": batch_run(recorder, first, "b", 2),
               "a2": batch_run(recorder, second, "a", 3), "plain": synthetic.record_run(recorder, turns=2, seed=4)}
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path, ids


def report(path: Path):
    return CliRunner().invoke(app, ["report", "--since", "3650d", "--by", "batch", "--json", "--db",
                                    f"sqlite:///{path}"])


def test_the_pristine_store_reports_by_batch(pristine):
    path, _ = pristine
    assert report(path).exit_code == 0


EDITS = {
    "an attempt moved to another batch": (
        "UPDATE batch_attempts SET batch_id = '{second}' WHERE run_id = '{a1}'", ("a1",)),
    "an attempt moved to another task": ("UPDATE batch_attempts SET task_id = 'b' WHERE run_id = '{a1}'", ("a1",)),
    "an attempt pointed at a plain run": (
        "UPDATE batch_attempts SET run_id = '{plain}' WHERE run_id = '{b1}'", ("b1", "plain")),
    "two attempts' runs swapped": (
        "UPDATE batch_attempts SET run_id = CASE run_id WHEN '{a1}' THEN '{a2}' ELSE '{a1}' END "
        "WHERE run_id IN ('{a1}', '{a2}')", ("a1", "a2")),
    "an attempt's run taken out": ("UPDATE batch_attempts SET run_id = NULL WHERE run_id = '{a2}'", ("a2",)),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edited_batch_attribution_is_refused_naming_the_runs(pristine, tmp_path, edit):
    path, ids = pristine
    sql, blamed = EDITS[edit]
    copy = tmp_path / "copy.db"
    shutil.copyfile(path, copy)
    with closing(sqlite3.connect(copy)) as conn, conn:
        assert conn.execute(sql.format(**ids)).rowcount >= 1
    result = report(copy)
    assert isinstance(result.exception, BatchAttributionMismatch), (result.output, result.exception)
    assert result.exception.exit_code == DAMAGED
    assert sorted(result.exception.run_ids) == sorted(ids[name] for name in blamed)
    for name in blamed:
        assert ids[name] in result.exception.message
