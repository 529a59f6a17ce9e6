"""Damage and tampering the read commands must name precisely: an altered
immutable column of the run row, a deleted last chained row, a wrong-typed
cell, a byte-corrupted page. Each ends in one clear line and the documented
damaged-store exit code (4), never a traceback or another command's code."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from store import Recorder, Store
from store.errors import StoreDamaged
from store.write import synthetic

DAMAGED = 4
IMMUTABLE = ("task", "created_at", "config_json", "policy_json", "repo", "escrow_version", "mode")


def build(path: Path, runs: int = 2) -> list[str]:
    with Store.open(f"sqlite:///{path}") as store:
        recorder = Recorder(store)
        ids = [synthetic.record_run(recorder, turns=3, seed=40 + i) for i in range(runs)]
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return ids


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, list[str]]:
    path = tmp_path_factory.mktemp("damage") / "escrow.db"
    return path, build(path)


def copy_with(pristine: Path, tmp: Path, sql: str, params: tuple = ()) -> Path:
    target = tmp / f"copy{random.random()}.db"
    shutil.copyfile(pristine, target)
    with closing(sqlite3.connect(target)) as conn, conn:
        assert conn.execute(sql, params).rowcount >= 1, sql
    return target


def invoke(path: Path, *args: str):
    return CliRunner().invoke(app, [*args, "--db", f"sqlite:///{path}"])


def code_of(result) -> int:
    exc = result.exception
    if exc is None or isinstance(exc, SystemExit):
        return result.exit_code
    assert hasattr(exc, "exit_code"), f"traceback: {exc!r}"
    return exc.exit_code


@pytest.mark.parametrize("column", IMMUTABLE)
def test_verify_names_the_altered_column_of_the_run_row(pristine, tmp_path, column):
    path, ids = pristine
    value = "altered" if column != "created_at" else 12345.5
    if column.endswith("_json"):
        value = '{"altered":1}'
    copy = copy_with(path, tmp_path, f'UPDATE runs SET "{column}" = ? WHERE id = ?', (value, ids[0]))
    with Store.open(f"sqlite:///{copy}", readonly=True) as store:
        check = store.verify(ids[0])
    assert not check.ok and check.table == "runs", check.problem
    assert f"run row column {column} was altered" in check.problem
    assert "model_calls" not in check.problem


def test_verify_still_blames_an_altered_genesis_event_itself(pristine, tmp_path):
    path, ids = pristine
    copy = copy_with(path, tmp_path, "UPDATE events SET data_json = replace(data_json, 'fix', 'FIX') "
                     "WHERE kind = 'genesis' AND run_id = ?", (ids[0],))
    with Store.open(f"sqlite:///{copy}", readonly=True) as store:
        check = store.verify(ids[0])
    assert (check.ok, check.seq, check.table) == (False, 1, "events"), check.problem


def test_verify_names_the_missing_seq_when_the_last_chained_row_is_deleted(pristine, tmp_path):
    path, ids = pristine
    with closing(sqlite3.connect(path)) as conn:
        (last,) = conn.execute("SELECT chain_seq FROM runs WHERE id = ?", (ids[1],)).fetchone()
    copy = copy_with(path, tmp_path, "DELETE FROM events WHERE run_id = ? AND seq = ?", (ids[1], last))
    with Store.open(f"sqlite:///{copy}", readonly=True) as store:
        check = store.verify(ids[1])
    assert not check.ok and f"seq {last} is missing" in check.problem, check.problem


RUN_COMMANDS = (
    ("verify", "{run}"),
    ("show", "{run}"),
    ("report", "{run}"),
    ("replay", "{run}", "--force", "--no-record"),
    ("export", "{run}", "--include-unverified"),
    ("verify", "--all"),
)
LISTINGS = (("runs",), ("report",))  # they read the run rows and sum the responses' figures
# A finished run's figures are read from its totals (schema 8): the responses'
# cells are summed by the aggregate report for a run without them (running,
# or finished with a damaged cell), as the run here is made; a damaged total
# is named by the report and by verify.
UNSUMMED = "DELETE FROM run_totals WHERE run_id = ?"
TOTALS_COMMANDS = (("verify", "{run}"), ("verify", "--all"), ("report",))
WRONG_CELLS = (
    ("model_calls", "request_body", "CAST(request_body AS BLOB)", "BLOB", RUN_COMMANDS),  # the request, by reference
    ("tool_executions", "gen_ai.tool.call.result", "CAST(\"gen_ai.tool.call.result\" AS BLOB)", "BLOB", RUN_COMMANDS),
    ("model_responses", "total_s", "'abc'", "text 'abc'", RUN_COMMANDS + LISTINGS),
    ("model_responses", "gen_ai.usage.input_tokens", "'abc'", "text 'abc'", RUN_COMMANDS + LISTINGS),
    ("runs", "finished_at", "'abc'", "text 'abc'", (*RUN_COMMANDS, ("runs",))),
    ("runs", "task", "CAST(task AS BLOB)", "BLOB", (*RUN_COMMANDS, ("runs",))),
    ("run_totals", "decode_s", "'abc'", "text 'abc'", TOTALS_COMMANDS),
    ("run_totals", "prompt_tokens", "CAST('12' AS BLOB)", "BLOB", TOTALS_COMMANDS),
)


@pytest.mark.parametrize(("table", "column", "expr", "shown", "commands"), WRONG_CELLS)
def test_a_wrong_typed_cell_is_named_by_every_read_command(pristine, tmp_path, table, column, expr, shown, commands):
    path, ids = pristine
    with closing(sqlite3.connect(path)) as conn:
        where = {"runs": "id = ?", "run_totals": "run_id = ? AND calls > 0 ORDER BY id LIMIT 1"}.get(
            table, "run_id = ? ORDER BY seq LIMIT 1")
        (row_id,) = conn.execute(f'SELECT id FROM "{table}" WHERE {where}', (ids[0],)).fetchone()
    copy = copy_with(path, tmp_path, f'UPDATE "{table}" SET "{column}" = {expr} WHERE id = ?', (row_id,))
    if table == "model_responses":
        with closing(sqlite3.connect(copy)) as conn, conn:
            conn.execute(UNSUMMED, (ids[0],))
    for command in commands:
        args = [a.format(run=ids[0]) for a in command]
        result = invoke(copy, *args)
        assert code_of(result) == DAMAGED, (args, result.output, result.exception)
        assert isinstance(result.exception, StoreDamaged), (args, result.exception)
        message = result.exception.message
        assert table in message and str(row_id) in message and column in message and shown in message, (args, message)


def test_a_byte_corrupted_store_exits_with_the_damaged_store_code(tmp_path):
    """4 KiB of noise at each of many offsets in the middle of the file:
    verify (which checks every page) always reports damage; every other read
    command either reads around the damaged page or reports it as damage,
    never exits 3 ("no store there") and never ends in a traceback."""
    clean = tmp_path / "clean.db"
    ids = build(clean, runs=12)
    size = os.path.getsize(clean)
    pages = list(range(size // 4096 // 4, size // 4096 * 3 // 4))
    seen = set()
    for page in random.Random(7).sample(pages, min(12, len(pages))):
        path = tmp_path / "damaged.db"
        shutil.copyfile(clean, path)
        with path.open("r+b") as fh:
            fh.seek(page * 4096)
            fh.write(random.Random(page).randbytes(4096))
        assert code_of(invoke(path, "verify", "--all")) == DAMAGED, page
        assert code_of(invoke(path, "verify", ids[0])) == DAMAGED, page
        for command in (("runs",), ("report",), ("show", ids[-1]), ("report", ids[-1]), ("export", "--all")):
            code = code_of(invoke(path, *command))
            assert code in (0, DAMAGED, 8), (page, command, code)
            seen.add(code)
    assert DAMAGED in seen
