"""Issue 42, group 14 (part): a batch report names no "costliest" tasks
when none cost anything (it listed five tasks of $0)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from store import Recorder, Store
from store.write import batches as bstore


def test_no_costliest_tasks_when_all_cost_nothing(tmp_path: Path) -> None:
    db = tmp_path / "escrow.db"
    with Store.open(f"sqlite:///{db}") as store:
        tasks = {name: (n, {"id": name}) for n, name in enumerate(("a", "b", "c"), start=1)}
        batch_id = bstore.create_batch(store, task_file="tasks.jsonl", tasks=tasks, settings={})
        recorder = Recorder(store)
        for name in tasks:
            attempt = bstore.start_attempt(store, batch_id, name)
            run_id = recorder.start_run(task=name, repo="/r", model="m", config={}, policy={})
            recorder.finish_run(run_id, "PASS", "the verifier passed", turn=0)
            bstore.finish_attempt(store, attempt, outcome=bstore.MODEL, run_id=run_id, verdict="PASS")
    shown = CliRunner().invoke(app, ["batch", "report", batch_id, "--db", f"sqlite:///{db}"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    assert "costliest: -" in shown.stdout.splitlines(), shown.stdout
    assert "slowest: " in shown.stdout
