"""Issue 42, group 8: ``export --all --format atif`` skips a run with no
answered model call (ATIF needs a step) with a note, as the chat format
does, instead of stopping at it (exit 8, 70 of 84 written)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from store import Recorder, Store
from tests.reports.test_absent_figures import record_run


def test_export_all_atif_skips_a_run_without_an_answered_call(store: Store, home: Path, tmp_path: Path) -> None:
    recorder = Recorder(store)
    empty = recorder.start_run(task="t", repo="/r", model="m", config={}, policy={})
    recorder.finish_run(empty, "FAULTED", "the server never answered", turn=0)
    answered = record_run(store)
    out = tmp_path / "all.atif.jsonl"
    got = CliRunner().invoke(app, ["export", "--all", "--format", "atif", "-o", str(out)], env={"COLUMNS": "80"})
    assert got.exit_code == 0, got.output
    docs = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(docs) == 1 and answered in json.dumps(docs[0])
    said = " ".join(got.stderr.split())
    assert "exported 1 run(s) as atif; skipped 1" in said and empty in said, got.stderr
    assert all(len(line) <= 80 for line in got.stderr.splitlines()), got.stderr
