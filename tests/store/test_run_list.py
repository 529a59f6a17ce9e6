"""The light runs reader (store.read.run_list) lists exactly what the full store
lists, falls back to it whenever the store is not plain, and keeps
`escrow runs` on a SQLite file free of SQLAlchemy."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from orchestrator.trajectory import RunView
from store import Recorder, Store
from store.read import liveness
from store.read.run_list import ESCAPED_RUN_COLUMNS, RUN_FIELDS, RunLine, RunQuery, read_run_lines, sqlite_file
from store.schema.tables import Run, table_of
from store.text_escape import EscapedString, EscapedText
from store.write import synthetic
from tests.processes import run_escrow

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0


@pytest.fixture(scope="module")
def varied(tmp_path_factory) -> Path:
    """Runs of three models and four verdicts over days, one with NUL and a
    mark in its task, one still running with an expired lease (crashed), one
    running with a live lease, one with no calls at all."""
    path = tmp_path_factory.mktemp("runs") / "s.db"
    with Store.open(f"sqlite:///{path}") as store:
        synthetic.record_many(store, 30, turns=4, seed=5)
        recorder = Recorder(store)
        hostile = recorder.start_run(task="fix\x00 this \ufdd0 \x1b[31m red", repo="/w", model="m\x00odel",
                                     config={}, policy={})
        recorder.finish_run(hostile, "PASS", "detail\x00", turn=0)
        crashed = synthetic.record_run(recorder, turns=2, seed=9, finish=False)
        liveness.take_lease(store, crashed, "gone-host:1", lease_s=-10.0)
        alive = synthetic.record_run(recorder, turns=1, seed=10, finish=False)
        liveness.take_lease(store, alive, "here:1", lease_s=1e9)
    return path


def full_lines(path: Path, **wanted) -> list[RunLine]:
    with Store.open(f"sqlite:///{path}", create=False, readonly=True) as store:
        found = store.runs(**wanted, now=NOW)
    return [RunLine.of(s) for s in found]


FILTERS = [
    {},
    {"limit": 5},
    {"status": "running"},
    {"status": "crashed"},
    {"status": "finished", "verdict": "PASS"},
    {"model": "qwen3-0.6b", "limit": 3},
    {"model": "m\x00odel"},
    {"since": 1_700_000_000.0 + 10 * 3600, "until": 1_700_000_000.0 + 20 * 3600},
    {"verdict": "nothing-has-this"},
]


@pytest.mark.parametrize("wanted", FILTERS, ids=[json.dumps(f, ensure_ascii=True) for f in FILTERS])
def test_the_light_reader_lists_what_the_store_lists(varied: Path, wanted: dict) -> None:
    light = read_run_lines(varied, RunQuery(**wanted), now=NOW)
    assert light is not None, "a plain store is read by the light reader"
    assert light == full_lines(varied, **wanted)


def test_the_comparison_sees_the_crashed_and_the_escaped_runs(varied: Path) -> None:
    lines = read_run_lines(varied, RunQuery(limit=100), now=NOW)
    assert lines is not None
    statuses = {line.run["status"] for line in lines}
    assert {"crashed", "running", "finished"} <= statuses
    # A crashed run says when it was last alive; a live or finished one does not.
    assert {line.run["status"] for line in lines if line.run["last_alive_at"] is not None} == {"crashed"}
    assert any(line.run["task"].startswith("fix\x00 this \ufdd0") for line in lines)
    assert any(line.totals["calls"] == 0 for line in lines)


def test_the_field_list_is_the_views_and_the_tables() -> None:
    # last_alive_at is no column: it is read from the run's lease (store.read.liveness).
    assert [name for name, _ in RUN_FIELDS] == [f for f in RunView.model_fields if f != "last_alive_at"]
    table = table_of(Run)
    assert {column for _, column in RUN_FIELDS} == {c.name for c in table.columns}
    escaped = {c.name for c in table.columns if isinstance(c.type, (EscapedText, EscapedString))}
    assert escaped == set(ESCAPED_RUN_COLUMNS)


def copy_of(path: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy.db"
    with closing(sqlite3.connect(path)) as source, closing(sqlite3.connect(target)) as dest:
        source.backup(dest)
    return target


@pytest.mark.parametrize("damage", [
    "UPDATE runs SET created_at = 'yesterday' WHERE rowid = 3",
    "UPDATE runs SET task = x'00ff' WHERE rowid = 4",
    "UPDATE runs SET chain_seq = 1.5 WHERE rowid = 2",
    "UPDATE model_responses SET \"gen_ai.usage.input_tokens\" = 'many' WHERE rowid = 1",
    "UPDATE model_responses SET ttft_s = x'01' WHERE rowid = 2",
    "UPDATE escrow_migrations SET version = 99 WHERE version = (SELECT max(version) FROM escrow_migrations)",
    "DROP TABLE run_leases",
])
def test_anything_not_plain_goes_to_the_full_store(varied: Path, tmp_path: Path, damage: str) -> None:
    path = copy_of(varied, tmp_path)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(damage)
        conn.commit()
    assert read_run_lines(path, RunQuery(limit=100), now=NOW) is None


def test_urls_the_light_reader_takes() -> None:
    assert sqlite_file("sqlite:////var/x.db") == Path("/var/x.db")
    assert sqlite_file("sqlite:///rel.db") == Path("rel.db")
    for other in ("sqlite://", "sqlite:///", "sqlite:///x.db?mode=ro", "postgresql://u@h/db", "sqlite+pysqlite:///x"):
        assert sqlite_file(other) is None


def escrow(*argv: str, code: str = "") -> subprocess.CompletedProcess[str]:
    probe = (
        "import sys\nfrom cli.main import main\n"
        f"sys.argv = ['escrow', *{list(argv)!r}]\n"
        "try:\n    main()\nfinally:\n"
        "    print('LOADED', 'sqlalchemy' in sys.modules, 'sqlmodel' in sys.modules, file=sys.stderr)\n"
    )
    return run_escrow(None, entry=(sys.executable, "-c", probe), cwd=ROOT)


def test_escrow_runs_on_a_sqlite_file_loads_no_sqlalchemy(varied: Path) -> None:
    done = escrow("runs", "--db", f"sqlite:///{varied}", "--json", "--limit", "100")
    assert done.returncode == 0, done.stderr
    assert "LOADED False False" in done.stderr
    listed = json.loads(done.stdout)
    assert len(listed) == 33 and all("totals" in run for run in listed)


def test_a_damaged_store_still_gets_the_full_stores_error(varied: Path, tmp_path: Path) -> None:
    path = copy_of(varied, tmp_path)
    with closing(sqlite3.connect(path)) as conn:
        row_id = conn.execute("SELECT id FROM runs ORDER BY created_at DESC LIMIT 1").fetchone()[0]
        conn.execute("UPDATE runs SET created_at = 'yesterday' WHERE id = ?", (row_id,))
        conn.commit()
    done = escrow("runs", "--db", f"sqlite:///{path}", "--limit", "100")
    assert done.returncode == 4, done.stderr
    assert "damaged store: runs row" in done.stderr and "created_at" in done.stderr
    assert "LOADED True True" in done.stderr and "Traceback" not in done.stderr


def test_a_missing_file_gets_the_full_stores_error(tmp_path: Path) -> None:
    done = escrow("runs", "--db", f"sqlite:///{tmp_path / 'nothing.db'}")
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "nothing.db").exists()


def test_a_batch_run_is_created_only_with_its_lease_and_its_attempt_naming_it(tmp_path: Path) -> None:
    """A batch run's row, its lease and its attempt's note of it are one
    transaction: a process that dies at any point between them must not leave
    a ``running`` run without a lease (it would never read as crashed), nor an
    attempt naming such a run. The lease write is made to fail, as a death
    mid-claim would leave it; neither the run nor the note may remain."""
    from store.write import batches as bstore

    with Store.open(f"sqlite:///{tmp_path / 's.db'}") as store:
        batch = bstore.create_batch(store, task_file="t.jsonl", settings={}, tasks={"a": (1, {})})
        attempt = bstore.start_attempt(store, batch, "a")
        recorder = Recorder(store)

        def start(owner: str, lease_s: float) -> str:
            return recorder.start_run(task="t", repo="/r", config={}, policy={}, model="m",
                                      lease=liveness.LeaseClaim(owner=owner, lease_s=lease_s, attempt_id=attempt))

        with store.write() as conn:
            conn.exec_driver_sql("CREATE TRIGGER no_lease BEFORE INSERT ON run_leases "
                                 "BEGIN SELECT RAISE(ABORT, 'the process died here'); END")
        with pytest.raises(Exception, match="the process died here"):
            start("here:1", 60)
        (seen,) = bstore.load_batch(store, batch).attempts
        assert seen.run_id is None and seen.outcome == bstore.STARTED
        assert store.runs() == []  # no run row either: nothing left "running" without a lease
        with store.write() as conn:
            conn.exec_driver_sql("DROP TRIGGER no_lease")
        run_id = start("gone:1", -1)
        (seen,) = bstore.load_batch(store, batch).attempts
        assert seen.run_id == run_id and run_id in liveness.crashed_runs(store)
        assert [s.run.id for s in store.runs()] == [run_id] and store.verify(run_id).ok


def test_figures_no_call_reported_list_as_absent_in_both_readers(tmp_path: Path, monkeypatch) -> None:
    """Real imported runs: a count no call reported is None (JSON null, "-" in
    the table), not 0; a run-level figure of the source counts; both
    readers say the same."""
    from store.write.importer import import_file
    from tests.interop.conftest import real

    path = tmp_path / "imported.db"
    with Store.open(f"sqlite:///{path}") as store:
        swe = import_file(store, real("swe-agent/6e44b9__sweagenttestrepo-1c2844.traj")).run_ids[0]
        bare = import_file(store, real("mini-swe-agent/local.traj.json")).run_ids[0]
        cached = import_file(store, real("mini-swe-agent/deepseek_lite_dev__sqlfluff__sqlfluff-2419.traj.json")
                             ).run_ids[0]
    light = read_run_lines(path, RunQuery(limit=10), now=NOW)
    assert light is not None and light == full_lines(path, limit=10)
    totals = {line.run["id"]: dict(line.totals) for line in light}
    stats = json.loads(real("swe-agent/6e44b9__sweagenttestrepo-1c2844.traj").read_bytes())["info"]["model_stats"]
    assert (totals[swe]["input_tokens"], totals[swe]["output_tokens"], totals[swe]["cached_input_tokens"]) == (
        stats["tokens_sent"], stats["tokens_received"], None)
    assert [totals[bare][k] for k in ("input_tokens", "cached_input_tokens", "output_tokens", "cost_usd")] == [
        None] * 4
    assert all(isinstance(totals[cached][k], int) and totals[cached][k] > 0
               for k in ("input_tokens", "cached_input_tokens", "output_tokens"))
    monkeypatch.setenv("COLUMNS", "200")  # every column on one line
    listed = escrow("runs", "--db", f"sqlite:///{path}")
    assert "import: the run's tokens and $ are its source's own figures" in listed.stdout  # marked as the source's
    assert "LOADED False False" in listed.stderr  # the light reader: no SQLAlchemy, no SQLModel
    head, *rows = listed.stdout.splitlines()
    row = next(r for r in rows if r.startswith(bare[:12]))
    # Figures are right-aligned: each ends where its header does.
    ends = {name: head.index(f" {name} ") + len(name) + 1 for name in ("$", "in", "cached", "out")}
    assert [row[:end].split()[-1] for end in ends.values()] == ["-"] * 4
