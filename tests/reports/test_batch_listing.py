"""``escrow batch list`` and ``escrow runs --batch`` (issue 27, item 5): no
command listed batches, and runs had no filter for one."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from orchestrator.composition.batch.driver import BatchPlan, start_batch
from orchestrator.composition.batch.errors import BatchNotFound
from orchestrator.composition.batch.pool import PoolOptions
from orchestrator.composition.batch.runner import TASK_ERROR
from orchestrator.composition.batch.tasks import load_task_file
from orchestrator.exit_codes import ExitCode
from store.write import batches as bstore


def test_batch_list_and_runs_of_a_batch(scripted, home: Path, tmp_path: Path) -> None:
    in_batch = scripted.record(scripted.GROWING)
    scripted.record(scripted.GROWING[:1], task="not in the batch")
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text("".join(json.dumps({"id": f"t{n}", "repo": str(tmp_path), "task": "fix", "verify": "true"})
                                 + "\n" for n in range(2)))
    plan = BatchPlan(tasks_dir=str(tmp_path), model_urls=("http://127.0.0.1:1/v1",), options=PoolOptions(workers=1))
    batch_id = start_batch(scripted.store, load_task_file(task_file), plan)
    attempt = bstore.start_attempt(scripted.store, batch_id, "t0")
    bstore.finish_attempt(scripted.store, attempt, outcome=bstore.MODEL, run_id=in_batch, verdict="PASS")
    failed = bstore.start_attempt(scripted.store, batch_id, "t1")
    bstore.finish_attempt(scripted.store, failed, outcome=TASK_ERROR, run_id=None, verdict=None,
                          error="repo: no such commit deadbeef")

    listed = json.loads(CliRunner().invoke(app, ["batch", "list", "--json"]).output)
    assert [(b["batch_id"], b["n_tasks"], b["passed"]) for b in listed] == [(batch_id, 2, 1)]
    text = CliRunner().invoke(app, ["batch", "list"]).output
    # The path, wider than its column, is folded onto the next lines, never cut.
    assert batch_id[:12] in text and str(task_file) in "".join(text.split())

    runs = json.loads(CliRunner().invoke(app, ["runs", "--batch", batch_id[:8], "--json"]).output)
    assert [r["id"] for r in runs] == [in_batch]
    assert CliRunner().invoke(app, ["runs", "--batch", batch_id[:8], "--verdict", "FAULTED", "--json"]).output \
        .strip() == "[]"
    assert isinstance(CliRunner().invoke(app, ["runs", "--batch", "nope"]).exception, BatchNotFound)

    report = CliRunner().invoke(app, ["batch", "report", batch_id]).output
    assert "repo: no such commit deadbeef" in " ".join(report.split())  # a task's error, not "-"


def test_no_batches(store, home: Path) -> None:
    assert CliRunner().invoke(app, ["batch", "list"]).output == "no batches\n"


def test_a_batch_not_found_exits_as_a_run_not_found_and_an_ambiguous_prefix_names_its_matches(
    scripted, home: Path, tmp_path: Path
) -> None:
    """Issue 42, group 14: "no such batch" exited 2 (a usage error) where "no
    such run" exits 6, and an ambiguous batch prefix named nothing."""
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text(json.dumps({"id": "t0", "repo": str(tmp_path), "task": "fix", "verify": "true"}) + "\n")
    plan = BatchPlan(tasks_dir=str(tmp_path), model_urls=("http://127.0.0.1:1/v1",), options=PoolOptions(workers=1))
    ids = [start_batch(scripted.store, load_task_file(task_file), plan) for _ in range(17)]
    shared = next(c for c in "0123456789abcdef" if sum(i.startswith(c) for i in ids) > 1)  # 17 ids, 16 digits

    for args in (["batch", "report", "nope"], ["batch", "status", "nope"], ["runs", "--batch", "nope"],
                 ["batch", "report", shared], ["show", "nope"]):
        shown = CliRunner().invoke(app, args)  # the code main() exits with
        assert getattr(shown.exception, "exit_code", None) == ExitCode.RUN_NOT_FOUND, (args, shown.exception)
    said = str(CliRunner().invoke(app, ["batch", "report", shared]).exception)
    assert "ambiguous" in said and all(i[:12] in said for i in sorted(i for i in ids if i.startswith(shared))[:5])
