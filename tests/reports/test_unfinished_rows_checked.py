"""Every row an aggregate report reads is checked. A run still running, or
crashed, has no totals: the report sums its chained rows, and verifies
their chain first, so a single cell of such a run edited in place (tokens,
TTFT, decode, attempts, the model copied onto a response or an attempt, an
attempt's duration or backoff, a tool's duration) stops every aggregate with
exit 4 naming the run, never a changed figure with exit 0."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from store import Recorder, Store
from store.errors import UncheckedRows
from store.read import liveness
from store.write import synthetic

DAMAGED = 4
REPORTS = (("--by", "model"), ("--by", "day"), ("--by", "engine"), ("--by", "status"))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    path = tmp_path_factory.mktemp("unfinished") / "escrow.db"
    with Store.open(f"sqlite:///{path}") as store:
        recorder = Recorder(store)
        ids = {"finished": synthetic.record_run(recorder, turns=2, seed=31),
               "running": synthetic.record_run(recorder, turns=3, seed=32, finish=False),
               "crashed": synthetic.record_run(recorder, turns=3, seed=33, finish=False)}
        liveness.take_lease(store, ids["running"], "alive", 3600.0)
        liveness.take_lease(store, ids["crashed"], "gone", -1.0)  # lapsed: reads crashed
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path, ids


CELLS = (
    ("model_responses", "gen_ai.usage.input_tokens", "+ 1000"),
    ("model_responses", "gen_ai.usage.cache_read.input_tokens", "+ 1"),
    ("model_responses", "gen_ai.usage.output_tokens", "+ 7"),
    ("model_responses", "ttft_s", "+ 3.0"),
    ("model_responses", "decode_s", "+ 2.5"),
    ("model_responses", "total_s", "+ 2.5"),
    ("model_responses", "n_attempts", "+ 2"),
    ("model_responses", "gen_ai.request.model", "|| 'x'"),
    ("model_responses", "engine", "|| 'x'"),
    ("call_attempts", "duration_s", "+ 9.0"),
    ("call_attempts", "backoff_s", "+ 9.0"),
    ("call_attempts", "gen_ai.request.model", "|| 'x'"),
    ("tool_executions", "duration_s", "+ 9.0"),
)


def report(path: Path, *args: str):
    return CliRunner().invoke(app, ["report", "--since", "3650d", *args, "--json", "--db", f"sqlite:///{path}"])


def test_the_pristine_store_reports(pristine):
    path, _ = pristine
    for args in REPORTS:
        result = report(path, *args)
        assert result.exit_code == 0, (args, result.output, result.exception)


@pytest.mark.parametrize("which", ["running", "crashed"])
@pytest.mark.parametrize(("table", "column", "change"), CELLS)
def test_one_edited_cell_of_an_unfinished_run_stops_every_aggregate(pristine, tmp_path, which, table, column, change):
    path, ids = pristine
    copy = tmp_path / "copy.db"
    shutil.copyfile(path, copy)
    with closing(sqlite3.connect(copy)) as conn, conn:
        (rowid,) = conn.execute(f'SELECT rowid FROM "{table}" WHERE run_id = ? ORDER BY seq LIMIT 1',
                                (ids[which],)).fetchone()
        empty = "''" if change.startswith("||") else "0"  # a NULL cell changes too
        edited = f'coalesce("{column}", {empty}) {change}'
        assert conn.execute(f'UPDATE "{table}" SET "{column}" = {edited} WHERE rowid = ?', (rowid,)).rowcount == 1
    for args in REPORTS:
        result = report(copy, *args)
        assert isinstance(result.exception, UncheckedRows), (args, result.output, result.exception)
        assert result.exception.exit_code == DAMAGED
        assert result.exception.run_ids == [ids[which]] and ids[which] in result.exception.message
