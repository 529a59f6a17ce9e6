"""The store write of ``escrow import`` is batched: the statements it sends
do not grow with a trajectory's steps nor with the files of one transaction,
and the chain it writes is the one verify checks, to every cell."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

from sqlalchemy import Engine, event

from store import Store
from store.chain import ChainRow
from store.check import verify
from store.write.importer import import_file, import_files
from tests.interop.conftest import own
from tests.store.test_tamper import altered


def steps_file(folder: Path, name: str, steps: int) -> Path:
    """A mini-swe-agent message list of ``steps`` calls, each with its command's output."""
    messages = [
        {"role": "system", "content": "You run one bash command per reply."},
        {"role": "user", "content": f"Task {name}: count the files."},
    ]
    for i in range(steps):
        messages += [
            {"role": "assistant", "content": f"THOUGHT: step {i}.\n\n```bash\nls -1 | wc -l\n```"},
            {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{i}\n</output>"},
        ]
    path = folder / f"{name}.traj.json"
    path.write_text(json.dumps(messages))
    return path


@contextmanager
def statements() -> Iterator[list[str]]:
    """Every statement sent to a database while the block runs."""
    sent: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany) -> None:
        sent.append(statement)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        yield sent
    finally:
        event.remove(Engine, "before_cursor_execute", count)


def test_statements_do_not_grow_with_steps(store, tmp_path):
    short, long = steps_file(tmp_path, "short", 2), steps_file(tmp_path, "long", 40)
    with statements() as for_short:
        two = import_file(store, short)
    with statements() as for_long:
        forty = import_file(store, long)
    assert (two.calls, forty.calls) == (2, 40)
    assert len(for_long) == len(for_short), (for_short, for_long)
    assert store.verify(forty.run_ids[0]).ok


def test_statements_do_not_grow_with_the_files_of_a_transaction(store, tmp_path):
    one = [steps_file(tmp_path, "alone", 3)]
    many = [steps_file(tmp_path, f"batch-{i}", 3) for i in range(20)]
    with statements() as for_one:
        list(import_files(store, one))
    with statements() as for_many:
        results = list(import_files(store, many))
    assert len(for_many) == len(for_one), (for_one, for_many)
    # A re-import of all of them is one look-up of what is already there.
    with statements() as for_again:
        again = list(import_files(store, many))
    assert all(r.skipped for r in again) and [r.run_ids for r in again] == [r.run_ids for r in results]
    assert len([s for s in for_again if s.lstrip().upper().startswith("SELECT")]) == 1, for_again
    assert all(store.verify(r).ok for result in results for r in result.run_ids)


def test_a_tampered_imported_row_is_detected(tmp_path):
    """Every cell of every row of imported runs (an Inspect log's two runs and
    a tool-calling trajectory) altered one at a time, and every row dropped,
    breaks verify; and verify names an altered tool result on disk."""
    path = tmp_path / "escrow.db"
    with Store.open(f"sqlite:///{path}") as store:
        run_ids = [*import_file(store, own("inspect/arith.eval")).run_ids,
                   *import_file(store, own("atif/terminal_v1_6.json")).run_ids]
        with store.read() as conn:
            run_rows, rows = verify.load(conn)
    assert len(run_ids) == 3 and all(c.ok for c in verify.check_records(run_rows, rows))
    records = [("runs", r) for r in run_rows] + [(item.table, item.row) for item in rows]
    assert {t for t, _ in records} >= {"runs", "events", "model_calls", "model_responses", "call_attempts",
                                         "candidates", "tool_executions", "turns"}
    for table, row in records:
        for column, value in row.items():
            changed = {**row, column: altered(value)}
            new_runs = [changed if table == "runs" and r is row else r for r in run_rows]
            new_rows = [ChainRow(table=i.table, row=changed) if i.row is row else i for i in rows]
            assert any(not c.ok for c in verify.check_records(new_runs, new_rows)), (table, column)
        kept_runs = [r for r in run_rows if r is not row]
        kept_rows = [i for i in rows if i.row is not row]
        assert any(not c.ok for c in verify.check_records(kept_runs, kept_rows)), ("delete", table)

    run_id = run_ids[-1]
    with closing(sqlite3.connect(path)) as conn, conn:
        rowid, seq = conn.execute(
            "SELECT rowid, seq FROM tool_executions WHERE run_id = ? ORDER BY seq LIMIT 1", (run_id,)
        ).fetchone()
        conn.execute('UPDATE tool_executions SET "gen_ai.tool.call.result" = "gen_ai.tool.call.result" || \'x\' '
                     "WHERE rowid = ?", (rowid,))
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        check = store.verify(run_id)
        assert (check.ok, check.table, check.seq) == (False, "tool_executions", seq)
        assert all(store.verify(r).ok for r in run_ids[:-1])
