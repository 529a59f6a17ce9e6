"""Issue 42, groups 4 and 9: ``import --json`` is JSON Lines (one object a
line, each parsing alone; two indented objects back to back parse as
neither), and its progress on stderr fits 80 columns."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from tests.interop.conftest import real

FILES = ("mini-swe-agent/deepseek_reasoner_dev__pvlib__pvlib-python-1606.traj.json", "openhands/basic.json")


def test_import_json_is_one_object_a_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path))
    monkeypatch.delenv("ESCROW_DB_URL", raising=False)
    bad = tmp_path / "not-a-trajectory.json"
    bad.write_text("{}", encoding="utf-8")
    got = CliRunner().invoke(app, ["import", "--json", *(str(real(f)) for f in FILES), str(bad)])
    lines = got.stdout.splitlines()
    docs = [json.loads(line) for line in lines]
    assert len(docs) == 3 and [len(d["run_ids"]) for d in docs[:2]] == [1, 1] and "error" in docs[2], got.stdout


def test_import_progress_fits_80_columns(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path))
    monkeypatch.delenv("ESCROW_DB_URL", raising=False)
    got = CliRunner().invoke(app, ["import", *(str(real(f)) for f in FILES)], env={"COLUMNS": "80"})
    assert got.exit_code == 0, got.output
    assert got.stderr.count("[1/2]") == 1 and all(len(line) <= 80 for line in got.stderr.splitlines()), got.stderr
    assert len(got.stdout.split()) == 2  # the run ids, one a line, for a pipe
