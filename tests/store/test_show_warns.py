"""Issue 42, group 12: ``show`` does not mislead. A run whose hash chain
does not verify is shown with a warning first (it read as a clean PASS), and
the engine probe's event is one line, not five of noise in every header."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from store import Recorder, Store


def test_show_warns_of_a_broken_chain_and_keeps_the_engine_to_a_line(tmp_path: Path) -> None:
    db = tmp_path / "escrow.db"
    with Store.open(f"sqlite:///{db}") as store:
        recorder = Recorder(store)
        run_id = recorder.start_run(task="t", repo="/r", model="m", config={}, policy={})
        recorder.record_event(run_id, None, "engine", {"engine": "openai-compatible", "version": None,
                                                       "evidence": "no engine endpoint answered", "reachable": True,
                                                       "settings": {}})
        recorder.finish_run(run_id, "PASS", "the verifier passed", turn=0)
    url = ["--db", f"sqlite:///{db}"]
    clean = CliRunner().invoke(app, ["show", run_id, *url], env={"COLUMNS": "80"}).stdout
    assert "does not verify" not in clean
    engine = [line for line in clean.splitlines() if "engine" in line]
    assert engine == ["  engine:  openai-compatible (no engine endpoint answered)"], clean
    with sqlite3.connect(db) as conn:  # a verdict rewritten after the fact
        conn.execute("UPDATE events SET data_json = replace(data_json, 'verifier passed', 'verifier PASSED') "
                     "WHERE kind = 'verdict'")
    shown = CliRunner().invoke(app, ["show", run_id, *url], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    first = shown.stdout.splitlines()[0]
    assert first.startswith("warning: this run's hash chain does not verify"), shown.stdout


def test_show_names_a_batch_runs_batch_task_and_attempt(tmp_path: Path) -> None:
    from store import batches as bstore

    db = tmp_path / "escrow.db"
    with Store.open(f"sqlite:///{db}") as store:
        batch_id = bstore.create_batch(store, task_file="tasks.jsonl", tasks={"calc-mean": (1, {"id": "calc-mean"})},
                                       settings={})
        first = bstore.start_attempt(store, batch_id, "calc-mean")
        bstore.finish_attempt(store, first, outcome=bstore.INFRASTRUCTURE, run_id=None, verdict=None)
        second = bstore.start_attempt(store, batch_id, "calc-mean")
        recorder = Recorder(store)
        run_id = recorder.start_run(task="t", repo="/r", model="m", config={}, policy={})
        recorder.finish_run(run_id, "PASS", "the verifier passed", turn=0)
        bstore.finish_attempt(store, second, outcome=bstore.MODEL, run_id=run_id, verdict="PASS")
    shown = CliRunner().invoke(app, ["show", run_id, "--db", f"sqlite:///{db}"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    assert f"  batch:   {batch_id[:12]}, task calc-mean, attempt 2" in shown.stdout.splitlines(), shown.stdout


def test_an_ambiguous_prefix_lists_its_matches(tmp_path: Path) -> None:
    """Issue 42, group 14: ``show 1`` said "ambiguous" without saying of what."""
    from collections import Counter

    db = tmp_path / "escrow.db"
    with Store.open(f"sqlite:///{db}") as store:
        recorder = Recorder(store)
        ids = [recorder.start_run(task="t", repo="/r", model="m", config={}, policy={}) for _ in range(17)]
    digit, _ = Counter(run_id[0] for run_id in ids).most_common(1)[0]  # 17 ids, 16 digits: one is shared
    shown = CliRunner().invoke(app, ["show", digit, "--db", f"sqlite:///{db}"])
    matches = [run_id for run_id in ids if run_id.startswith(digit)]
    assert len(matches) >= 2 and all(run_id[:12] in str(shown.exception) for run_id in matches[:5]), shown.exception
