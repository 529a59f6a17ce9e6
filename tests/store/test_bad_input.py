"""A missing, non-SQLite, truncated, foreign or newer-schema file gives a clear
error and exit code, never a traceback, and is never written to."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from store import NotAStore, Recorder, SchemaTooNew, Store, StoreNotFound
from store.schema.migrations import LATEST
from store.write import synthetic

ESCROW = str(Path(sys.executable).with_name("escrow"))


def sql(path: Path, *statements: str) -> None:
    """Run statements and close the connection, so SQLite checkpoints now and
    not when the garbage collector gets to it in the middle of a test."""
    with closing(sqlite3.connect(path)) as conn, conn:
        for statement in statements:
            conn.execute(statement)


def make_newer(path: Path) -> None:
    with Store.open(f"sqlite:///{path}") as store:
        synthetic.record_run(Recorder(store), turns=1)
    sql(path, f"INSERT INTO escrow_migrations VALUES ({LATEST + 1}, 'from the future', 0)")


def make_truncated(path: Path) -> None:
    with Store.open(f"sqlite:///{path}") as store:
        synthetic.record_run(Recorder(store), turns=20)
    sql(path, "PRAGMA wal_checkpoint(TRUNCATE)")
    data = path.read_bytes()
    for extra in ("-wal", "-shm"):
        Path(f"{path}{extra}").unlink(missing_ok=True)
    path.write_bytes(data[: len(data) // 2])


def make_foreign(path: Path) -> None:
    sql(path, "CREATE TABLE notes (body TEXT)", "INSERT INTO notes VALUES ('mine')")


def make_half_page(path: Path) -> None:
    make_foreign(path)
    data = path.read_bytes()
    path.write_bytes(data[:1000])


BAD_FILES = {
    "not sqlite": (lambda p: p.write_text("just some text, " * 100), NotAStore, "not a SQLite database"),
    "empty": (lambda p: p.write_bytes(b""), NotAStore, "empty"),
    "truncated": (make_truncated, NotAStore, "truncated"),
    "half a page": (make_half_page, NotAStore, "truncated"),
    "foreign sqlite": (make_foreign, NotAStore, "not an Escrow store"),
    "newer schema": (make_newer, SchemaTooNew, "newer than this Escrow"),
}
COMMANDS = (["runs"], ["runs", "--json"], ["show", "abc"], ["verify", "--all"], ["verify", "abc"])


def snapshot(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_bad_file_is_refused_by_every_command_and_left_untouched(kind, tmp_path, monkeypatch):
    make, error, words = BAD_FILES[kind]
    path = tmp_path / "escrow.db"
    make(path)
    before = snapshot(path)
    monkeypatch.setenv("ESCROW_DB_URL", f"sqlite:///{path}")
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path / "home"))
    for args in COMMANDS:
        result = CliRunner().invoke(app, args)
        assert isinstance(result.exception, error), (args, result.output, result.exception)
        assert words in str(result.exception)
    if kind != "empty":  # SQLite's own view: an empty file is a new database, which a writer may initialise
        with pytest.raises(error):
            Store.open(f"sqlite:///{path}")
    assert snapshot(path) == before


@pytest.mark.parametrize("kind", ["not sqlite", "truncated", "newer schema"])
def test_bad_file_from_the_real_command_is_one_line_with_an_exit_code(kind, tmp_path):
    make, error, words = BAD_FILES[kind]
    path = tmp_path / "escrow.db"
    make(path)
    before = snapshot(path)
    env = {**os.environ, "ESCROW_DB_URL": f"sqlite:///{path}", "ESCROW_HOME": str(tmp_path / "home"), "COLUMNS": "400"}
    done = subprocess.run([ESCROW, "runs"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == error.exit_code
    assert "Traceback" not in done.stderr and words in done.stderr and done.stderr.count("\n") == 1
    assert snapshot(path) == before


def test_missing_store_is_not_created_by_read_commands(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "escrow.db"
    monkeypatch.setenv("ESCROW_DB_URL", f"sqlite:///{path}")
    for args in COMMANDS:
        result = CliRunner().invoke(app, args)
        assert isinstance(result.exception, StoreNotFound) and result.exception.exit_code == 3
    env = {**os.environ, "ESCROW_DB_URL": f"sqlite:///{path}"}
    done = subprocess.run([ESCROW, "show", "abc"], env=env, capture_output=True, text=True, timeout=60)
    assert (
        done.returncode == StoreNotFound.exit_code and "no store at" in done.stderr and "Traceback" not in done.stderr
    )
    assert not path.exists() and not path.parent.exists()


def test_escrow_home_relocates_the_default_store(tmp_path, monkeypatch):
    monkeypatch.delenv("ESCROW_DB_URL", raising=False)
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path))
    with Store.open(f"sqlite:///{tmp_path / 'escrow.db'}") as store:
        run_id = synthetic.record_run(Recorder(store), turns=1)
    result = CliRunner().invoke(app, ["runs", "--json"])
    assert result.exit_code == 0 and run_id in result.output


def test_unknown_run_and_ambiguous_prefix_are_clear_errors(recorded, db_path, monkeypatch):
    store, run_id = recorded
    monkeypatch.setenv("ESCROW_DB_URL", f"sqlite:///{db_path}")
    for args in (["show", "zzzz"], ["show", ""], ["show", "%"]):
        result = CliRunner().invoke(app, args)
        assert result.exception is not None and result.exception.exit_code == 6
    result = CliRunner().invoke(app, ["show", run_id[:10]])
    assert result.exit_code == 0 and run_id in result.output
