"""Tamper evidence: altering, deleting or reordering any single row of a
recorded run is reported by ``escrow verify``."""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.main import app
from store import ChainBroken, Recorder, Store
from store.chain import ChainRow
from store.check import verify
from store.errors import StoreDamaged
from store.schema.tables import CHAINED_TABLES
from store.write import synthetic
from store.write.teacher_scores import CallScore

TABLES = ("runs", *CHAINED_TABLES)


def record_finished_and_crashed(recorder: Recorder) -> None:
    """A finished run (scored by a teacher after it ended), and one cut off
    with a call in flight (a crash)."""
    store = recorder.store
    assert isinstance(store, Store)  # a Recorder writes through any Writable; this one is a store
    finished = synthetic.record_run(recorder, turns=2, seed=11)
    call_id, turn, _ = store.answered_envelopes(finished)[0]
    store.record_teacher_scores([CallScore(run_id=finished, call_id=call_id, turn=turn, teacher_model="teacher",
                                           teacher_engine="vllm", top_k=1, request_sha256="0" * 64,
                                           logprobs=(-0.5,), in_top_k=(True,), top=(((7, -0.5), (3, -1.5)),),
                                           duration_s=0.5)])
    unfinished = synthetic.record_run(recorder, turns=1, seed=12, finish=False)
    recorder.turn(unfinished, 1).request(synthetic.request_for(1, []))  # the call in flight at a crash


def build(path: Path) -> None:
    with Store.open(f"sqlite:///{path}") as store:
        record_finished_and_crashed(Recorder(store))
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tamper") / "escrow.db"
    build(path)
    return path


def inventory(path: Path) -> list[tuple[str, int, str, object]]:
    """(table, rowid, column, value) for every cell of every run row."""
    cells = []
    with closing(sqlite3.connect(path)) as conn:
        for table in TABLES:
            names = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            for row in conn.execute(f'SELECT rowid, * FROM "{table}"'):
                cells += [(table, row[0], name, value) for name, value in zip(names, row[1:], strict=True)]
    return cells


def rows_of(path: Path) -> list[tuple[str, int]]:
    return sorted({(table, rowid) for table, rowid, _, _ in inventory(path)})


def altered(value: object) -> object:
    if value is None:
        return "x"
    if isinstance(value, bool) or isinstance(value, int):
        return value + 1000  # far enough not to collide with a UNIQUE neighbour
    if isinstance(value, float):
        return value + 0.5
    return f"{value}x"


def tampered_copy(pristine: Path, tmp: Path, statements: list[tuple[str, tuple]]) -> Path:
    target = tmp / "tampered.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
    shutil.copyfile(pristine, target)
    with closing(sqlite3.connect(target)) as conn, conn:
        for sql, params in statements:
            assert conn.execute(sql, params).rowcount == 1, sql
    return target


def alter(table: str, rowid: int, column: str, value: object) -> list[tuple[str, tuple]]:
    return [(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?', (altered(value), rowid))]


def delete(table: str, rowid: int) -> list[tuple[str, tuple]]:
    return [(f'DELETE FROM "{table}" WHERE rowid = ?', (rowid,))]


def swap_seq(a: tuple[str, int, int], b: tuple[str, int, int]) -> list[tuple[str, tuple]]:
    """Exchange the chain positions of two rows (via a free seq, for UNIQUE)."""
    (ta, ra, sa), (tb, rb, sb) = a, b
    return [
        (f'UPDATE "{ta}" SET seq = -1 WHERE rowid = ?', (ra,)),
        (f'UPDATE "{tb}" SET seq = ? WHERE rowid = ?', (sa, rb)),
        (f'UPDATE "{ta}" SET seq = ? WHERE rowid = ?', (sb, ra)),
    ]


def chained_positions(path: Path) -> list[tuple[str, str, int, int]]:
    """(run_id, table, rowid, seq) of every chained row."""
    with closing(sqlite3.connect(path)) as conn:
        return [
            (run_id, table, rowid, seq)
            for table in CHAINED_TABLES
            for rowid, run_id, seq in conn.execute(f'SELECT rowid, run_id, seq FROM "{table}"')
        ]


def api_reports_broken(path: Path) -> bool:
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        return any(not check.ok for check in store.verify_all())


def test_the_pristine_store_verifies(pristine):
    with Store.open(f"sqlite:///{pristine}", readonly=True) as store:
        checks = store.verify_all()
    assert len(checks) == 2 and all(c.ok for c in checks)


def loaded(path: Path) -> tuple[list[dict], list[ChainRow]]:
    with Store.open(f"sqlite:///{path}", readonly=True) as store, store.read() as conn:
        return verify.load(conn)


def test_every_single_cell_alteration_and_row_deletion_is_detected(pristine):
    """Exhaustive, over the rows as read back (the checks are pure): every
    cell of every row altered, and every row dropped, one at a time."""
    run_rows, rows = loaded(pristine)
    assert all(c.ok for c in verify.check_records(run_rows, rows))
    records = [("runs", r) for r in run_rows] + [(item.table, item.row) for item in rows]
    assert len(records) > 40 and {t for t, _ in records} == set(TABLES)
    for table, row in records:
        for column, value in row.items():
            changed = {**row, column: altered(value)}
            new_runs = [changed if table == "runs" and r is row else r for r in run_rows]
            new_rows = [ChainRow(table=i.table, row=changed) if i.row is row else i for i in rows]
            checks = verify.check_records(new_runs, new_rows)
            assert any(not c.ok for c in checks), (table, column)
        kept_runs = [r for r in run_rows if r is not row]
        kept_rows = [i for i in rows if i.row is not row]
        assert any(not c.ok for c in verify.check_records(kept_runs, kept_rows)), ("delete", table)


def mutations(pristine: Path) -> st.SearchStrategy:
    cells = inventory(pristine)
    positions = chained_positions(pristine)
    same_run_pairs = [
        ((ta, ra, sa), (tb, rb, sb))
        for run_a, ta, ra, sa in positions
        for run_b, tb, rb, sb in positions
        if run_a == run_b and sa < sb
    ]
    return st.one_of(
        st.sampled_from(cells).map(lambda c: ("alter", alter(*c))),
        st.sampled_from(rows_of(pristine)).map(lambda r: ("delete", delete(*r))),
        st.sampled_from(same_run_pairs).map(lambda p: ("reorder", swap_seq(*p))),
    )


def test_escrow_verify_reports_any_single_row_tampering(pristine, tmp_path_factory, monkeypatch):
    tmp = tmp_path_factory.mktemp("cases")

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(mutations(pristine))
    def check(mutation):
        kind, statements = mutation
        path = tampered_copy(pristine, tmp, statements)
        result = CliRunner().invoke(app, ["verify", "--all", "--db", f"sqlite:///{path}"])
        if isinstance(result.exception, StoreDamaged):
            # Text written into a NULL numeric cell: a damaged cell, named as such.
            assert result.exception.exit_code == 4 and statements[0][0].split('"')[3] in result.exception.message
            return
        assert isinstance(result.exception, ChainBroken), (kind, statements, result.output)
        assert result.exception.exit_code == 1 and "BROKEN" in result.output

    check()


def test_an_altered_teacher_top_k_is_detected(pristine, tmp_path):
    """The top K cell (schema 14) rewritten as another well-formed top K (one
    id swapped): verify breaks at that score row."""
    with closing(sqlite3.connect(pristine)) as conn:
        (rowid, run_id, seq, top), = conn.execute("SELECT rowid, run_id, seq, top_json FROM teacher_scores").fetchall()
    assert json.loads(top) == [[[7, -0.5], [3, -1.5]]]
    path = tampered_copy(pristine, tmp_path, [('UPDATE "teacher_scores" SET top_json = ? WHERE rowid = ?',
                                               ('[[[7,-0.5],[4,-1.5]]]', rowid))])
    result = CliRunner().invoke(app, ["verify", run_id[:8], "--db", f"sqlite:///{path}"])
    assert result.exit_code == 1 and "BROKEN" in result.output
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        check = store.verify(run_id)
    assert (check.ok, check.seq, check.table) == (False, seq, "teacher_scores")


def test_verify_names_the_first_broken_link(pristine, tmp_path):
    positions = sorted(p for p in chained_positions(pristine) if p[3] == 5)
    run_id, table, rowid, _ = positions[0]
    path = tampered_copy(
        pristine, tmp_path, [(f'UPDATE "{table}" SET chain_hash = ? WHERE rowid = ?', ("0" * 64, rowid))]
    )
    result = CliRunner().invoke(app, ["verify", run_id[:8], "--db", f"sqlite:///{path}", "--json"])
    assert result.exit_code == 1
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        check = store.verify(run_id)
    assert (check.ok, check.seq, check.table) == (False, 5, table)
    assert "hash mismatch at seq 5" in check.problem
