"""Issue 42, group 6: a batch's input is checked before anything else, and
named for what it is. A missing task file is not reported as an unreachable
model server; a file of only bad rows starts no (empty) batch and exits 2;
a bad policy is reported before the server is tried; and the progress line
counts a task's error (a missing context window) instead of "failed 0"."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.composition.batch.live_counts import BatchProgress
from orchestrator.composition.batch.runner import TASK_ERROR, AttemptResult
from orchestrator.exit_codes import ExitCode
from store import Store
from store.write import batches as bstore
from store.write.batches import MODEL


@pytest.fixture
def nothing_listens() -> str:
    with socket.socket() as probe:  # a port just freed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/v1"


def batch(tmp_path: Path, url: str, *args: str):
    db = tmp_path / "escrow.db"
    got = CliRunner().invoke(app, ["batch", *args, "--model-url", url, "--db", f"sqlite:///{db}"])
    return got, db


def failure(got) -> tuple[int | None, str]:
    """The exit code and message the console entry gives the error (as for every command)."""
    return getattr(got.exception, "exit_code", got.exit_code), str(got.exception or got.output)


def test_a_missing_task_file_is_named(tmp_path: Path, nothing_listens: str) -> None:
    got, db = batch(tmp_path, nothing_listens, str(tmp_path / "no-such-tasks.jsonl"))
    code, message = failure(got)
    assert code == ExitCode.USAGE and "no-such-tasks.jsonl" in message and "server" not in message, message


def test_a_file_of_only_bad_rows_starts_no_batch(tmp_path: Path, nothing_listens: str) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a"}\nnot json\n', encoding="utf-8")
    got, db = batch(tmp_path, nothing_listens, str(tasks))
    code, message = failure(got)
    assert code == ExitCode.USAGE and "no task" in message and "2 rows" in message, message
    if db.exists():
        with Store.open(f"sqlite:///{db}", readonly=True) as store:
            assert bstore.list_batches(store, per_page=5)[1] == 0


def test_a_bad_policy_is_reported_before_the_server(tmp_path: Path, nothing_listens: str) -> None:
    bad = tmp_path / "bad-policy.toml"
    bad.write_text("[tools]\nallowed = 7\n", encoding="utf-8")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "a", "repo": ".", "task": "t", "verify": "true", "policy": str(bad)}) + "\n",
                     encoding="utf-8")
    got, _ = batch(tmp_path, nothing_listens, str(tasks))
    code, message = failure(got)
    assert code == ExitCode.POLICY_INVALID and "bad-policy.toml" in message and "server" not in message, message


def test_progress_counts_a_tasks_error() -> None:
    progress = BatchProgress(3)
    progress.attempt(AttemptResult(task_id="a", outcome=MODEL, verdict="PASS", run_id="r"))
    progress.attempt(AttemptResult(task_id="b", outcome=TASK_ERROR, verdict=None, run_id=None,
                                   error="the server reports no context window; give --context-window"))
    line = progress.line(1)
    assert "2/3 done" in line and "failed 0 · task errors 1" in line, line
