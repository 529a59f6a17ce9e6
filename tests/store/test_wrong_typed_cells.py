"""A cell of the wrong type, in any column of any table, never ends a
reading command in a traceback: each reader that reads it stops with the
damaged-store error (exit 4) naming the table, the row and the column, and
one that does not read it answers as usual. The store holds a finished run
of a batch, an unfinished one with its lease, a deleted run's note, totals,
their TTFT rows and the per-day rollup; each cell is given a value its
column cannot hold (text in a number column, a BLOB in a text one) in a copy,
and every reading command runs on it."""

from __future__ import annotations

import re
import shutil
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from store import Recorder, Store
from store.errors import StoreDamaged
from store.read import liveness
from store.write import batches as bstore
from store.write import synthetic

DAMAGED = 4
WRONG_TYPE = re.compile(r"column .+ holds .+, not (TEXT|INTEGER|REAL)")
"""The damaged-store error of a wrong-typed cell (``store.check.cells.check_row``); another one (a
totals row no longer matching, a run that no longer verifies) names the run instead."""


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("cells") / "escrow.db"
    with Store.open(f"sqlite:///{path}") as store:
        recorder = Recorder(store)
        batch_id = bstore.create_batch(store, task_file="tasks.jsonl", settings={},
                                       tasks={"t1": (1, {"id": "t1", "task": "fix", "repo": "r"})})
        attempt_id = bstore.start_attempt(store, batch_id, "t1")
        finished = synthetic.record_run(recorder, turns=3, seed=21)
        bstore.finish_attempt(store, attempt_id, outcome=bstore.MODEL, run_id=finished, verdict="PASS")
        running = synthetic.record_run(recorder, turns=2, seed=22, finish=False)
        liveness.take_lease(store, running, "someone", 3600.0)
    with closing(sqlite3.connect(path)) as conn:
        now = time.time()
        with conn:
            conn.execute("INSERT INTO deletions (run_id, created_at, deleted_at, verdict, chain_seq, chain_head, "
                         "reason) VALUES ('gone', ?, ?, 'PASS', 3, 'ab', 'gc')", (now - 10, now))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path, {"run": finished, "running": running, "batch": batch_id}


SINCE = ("report", "--since", "2000-01-01", "--by")
RUN_READERS = (
    ("verify", "{run}"), ("verify", "--all"), ("show", "{run}"), ("report", "{run}"), ("report", "{running}"),
    ("runs",), (*SINCE, "model"), (*SINCE, "day"), ("export", "{run}", "--include-unverified"),
    ("replay", "{running}", "--no-record", "--force"),
)
DERIVED_READERS = (
    ("verify", "{run}"), ("verify", "--all"), ("report", "{run}"),
    *((*SINCE, by) for by in ("model", "day", "engine", "batch")), ("replay", "{running}", "--no-record", "--force"),
)
BATCH_READERS = (("runs", "--batch", "{batch}"), ("batch", "status", "{batch}"), ("batch", "report", "{batch}"),
                 (*SINCE, "batch"))
OTHER_READERS = (("runs",), ("verify", "--all"), ("show", "{running}"), ("report", "{running}"), (*SINCE, "status"))
READERS = {"run_totals": DERIVED_READERS, "run_ttfts": DERIVED_READERS, "ttft_days": DERIVED_READERS,
           "batches": BATCH_READERS, "batch_tasks": BATCH_READERS, "batch_attempts": BATCH_READERS,
           "run_leases": OTHER_READERS, "deletions": OTHER_READERS, "escrow_migrations": OTHER_READERS}
"""The commands that read each table (the chained tables, runs and blobs: ``RUN_READERS``)."""


def cells(path: Path) -> list[tuple[str, int, str, str]]:
    """(table, rowid, column, SQL type) of one row of each table, every column."""
    out = []
    with closing(sqlite3.connect(path)) as conn:
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                                     "'sqlite_%' ORDER BY name"):
            row = conn.execute(f'SELECT rowid FROM "{table}" ORDER BY rowid LIMIT 1').fetchone()
            if row is None:
                continue
            for _, name, sql_type, _, _, pk in conn.execute(f'PRAGMA table_info("{table}")'):
                if pk and sql_type == "INTEGER":
                    continue  # the rowid itself: SQLite refuses anything but an integer there
                out.append((table, row[0], name, sql_type))
    return out


def wrong(sql_type: str) -> str:
    return "X'616263'" if sql_type in ("VARCHAR", "TEXT") else "'abc'"


def test_every_wrong_typed_cell_is_the_damaged_store_error_for_every_reader(pristine, tmp_path):
    path, ids = pristine
    found = cells(path)
    assert {t for t, *_ in found} >= {"runs", "events", "model_calls", "model_responses", "call_attempts",
                                      "tool_executions", "run_totals", "run_ttfts", "ttft_days", "batches",
                                      "batch_tasks", "batch_attempts", "run_leases", "deletions", "blobs"}
    tracebacks, misnamed, damaged = [], [], 0
    for table, rowid, column, sql_type in found:
        copy = tmp_path / f"{table}.{column}.db"  # a file of its own: no WAL of another cell's copy applies
        shutil.copyfile(path, copy)
        with closing(sqlite3.connect(copy)) as conn, conn:
            conn.execute(f'UPDATE "{table}" SET "{column}" = {wrong(sql_type)} WHERE rowid = ?', (rowid,))
        for command in READERS.get(table, RUN_READERS):
            args = [a.format(**ids) for a in command]
            result = CliRunner().invoke(app, [*args, "--db", f"sqlite:///{copy}"])
            exc = result.exception
            if exc is not None and not isinstance(exc, SystemExit) and not hasattr(exc, "exit_code"):
                tracebacks.append((table, column, " ".join(args), repr(exc)[:120]))
                continue
            if isinstance(exc, StoreDamaged) and WRONG_TYPE.search(exc.message):
                damaged += 1
                if not (exc.exit_code == DAMAGED and table in exc.message and column in exc.message):
                    misnamed.append((table, column, " ".join(args), exc.message[:160]))
    assert tracebacks == [], "\n".join(map(str, tracebacks))
    assert misnamed == [], "\n".join(map(str, misnamed))
    assert damaged > len(found)  # most cells are read by several commands
