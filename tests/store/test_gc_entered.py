"""Issue 42, group 3: ``gc`` ages a run by when it entered this store (an
imported run keeps its source's dates for reports, but was not "started"
here months ago), lists every run it would delete (``--dry-run``) or
deleted (plain and ``--json``), and against a missing store creates nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from orchestrator.exit_codes import ExitCode
from store import Recorder, Store
from store.write import synthetic
from store.write.importer import import_files
from tests.interop.conftest import real

DAY = 86_400.0


def test_gc_keeps_what_was_just_imported_and_names_what_it_deletes(tmp_path: Path) -> None:
    db = tmp_path / "escrow.db"
    with Store.open(f"sqlite:///{db}") as store:
        # An inspect log of 2025, imported now.
        source = real("inspect/2025-02-11T15-17-00-05-00_popularity_dPiJifoWeEQBrfWsAopzWr.eval")
        imported = list(import_files(store, [source]))[0].run_ids
        # Its source's dates, kept for reports.
        assert all(store.run(run_id).created_at < time.time() - 60 * DAY for run_id in imported)
        old = synthetic.record_run(Recorder(store, clock=lambda: time.time() - 40 * DAY), turns=1, seed=1)
        synthetic.record_run(Recorder(store), turns=1, seed=2)
    url = ["--db", f"sqlite:///{db}"]
    dry = CliRunner().invoke(app, ["gc", "--older-than", "30d", "--dry-run", *url], env={"COLUMNS": "80"})
    assert dry.exit_code == 0, dry.output
    assert old[:12] in dry.stdout and not any(run_id[:12] in dry.stdout for run_id in imported), dry.stdout
    assert all(len(line) <= 80 for line in dry.stdout.splitlines()), dry.stdout
    done = CliRunner().invoke(app, ["gc", "--older-than", "30d", "--json", *url])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    assert [r["run_id"] for r in doc["runs"]] == [old] and doc["runs_deleted"] == 1
    with Store.open(f"sqlite:///{db}", readonly=True) as store:
        assert all(store.run(run_id).mode == "import" for run_id in imported)


def test_gc_against_a_missing_store_creates_none(tmp_path: Path) -> None:
    db = tmp_path / "nothing-here.db"
    got = CliRunner().invoke(app, ["gc", "--older-than", "30d", "--db", f"sqlite:///{db}"])
    # The console entry maps the error to its exit code, as for `runs` and `show`.
    assert getattr(got.exception, "exit_code", None) == ExitCode.STORE_MISSING, got.output
    assert "no store" in str(got.exception) and not db.exists()


def test_a_real_gc_names_each_run_it_deleted(tmp_path: Path) -> None:
    db = tmp_path / "escrow.db"
    with Store.open(f"sqlite:///{db}") as store:
        old = synthetic.record_run(Recorder(store, clock=lambda: time.time() - 40 * DAY), turns=1, seed=1)
        kept = synthetic.record_run(Recorder(store), turns=1, seed=2)
    done = CliRunner().invoke(app, ["gc", "--older-than", "30d", "--db", f"sqlite:///{db}"], env={"COLUMNS": "80"})
    assert done.exit_code == 0, done.output
    assert "deleted 1 runs" in done.stdout and old[:12] in done.stdout and kept[:12] not in done.stdout, done.stdout
    assert all(len(line) <= 80 for line in done.stdout.splitlines()), done.stdout
