"""A run with no verdict replays as a recording that ends where the run died
(exit 9), whatever the point of death: the real loop records a run that
fixes the bug, in a child process SIGKILLed just before its Nth commit (a
hook on the store's engine), for every N, the finishing transaction (the
verdict event and the run row's close) included. Killed there, every turn
is recorded and the replay reaches the verdict itself; it is still not the
recorded ending, which has none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.exit_codes import ExitCode
from orchestrator.replay import Replayer
from store import Store

ROOT = Path(__file__).resolve().parents[2]

RECORD = """
import os, signal, sys
from sqlalchemy import event
from orchestrator.adapters.fault_server import FaultServer
from store import Store
from tests.replay.recording import fixing_steps, record_memory_run
url, kill_at = sys.argv[1], int(sys.argv[2])
commits = [0]
def counted(conn):
    commits[0] += 1
    if commits[0] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
with FaultServer() as server, Store.open(url) as store:
    event.listen(store._writer, "commit", counted)  # every write goes through it
    run_id = record_memory_run(store, server, fixing_steps())
print(commits[0], run_id)
"""


def record(url: str, kill_at: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RECORD, url, str(kill_at)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def writes(tmp_path_factory) -> int:
    done = record(f"sqlite:///{tmp_path_factory.mktemp('whole') / 'escrow.db'}")
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[0])


def test_a_run_killed_at_any_write_replays_to_where_its_recording_ends(writes, tmp_path):
    assert writes >= 10
    wrong = []
    # From the second commit: the first creates the run (killed there, there is none).
    for kill_at in range(2, writes + 1):
        path = tmp_path / f"kill{kill_at}.db"
        killed = record(f"sqlite:///{path}", kill_at)
        assert killed.returncode == -9, (kill_at, killed.stderr)
        with Store.open(f"sqlite:///{path}") as store:
            (summary,) = store.runs()
            run = summary.run
            assert run.verdict is None
            replayer = Replayer(store)
            report = replayer.offline(replayer.load(run.id), record=False)
        if not (report.identical and report.recording_ends_at is not None):
            wrong.append((kill_at, report.verdict, report.recording_ends_at, report.identical))
    assert wrong == []


def test_killed_in_its_finishing_transaction_the_cli_exits_9(writes, tmp_path):
    path = tmp_path / "escrow.db"
    killed = record(f"sqlite:///{path}", writes)  # the last commit: the verdict's
    assert killed.returncode == -9
    with Store.open(f"sqlite:///{path}") as store:
        (summary,) = store.runs()
        run = summary.run
        turns = len(store.turns(run.id))
    result = CliRunner().invoke(app, ["replay", run.id, "--db", f"sqlite:///{path}", "--no-record"])
    assert result.exit_code == ExitCode.REPLAY_RECORDING_ENDS, result.output
    assert f"IDENTICAL UP TO TURN {turns}, where the recording ends (the run died)" in result.output
