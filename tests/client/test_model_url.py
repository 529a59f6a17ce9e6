"""The model URL is checked up front (issue 27, point 5): a URL without
http(s):// or a server that does not answer costs one line on stderr and
exit 2, before a sandbox starts or a run or a batch is recorded. Before, a
down server started a sandbox and recorded a TRANSPORT_FAILURE run (exit 1)."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
from pathlib import Path

import pytest

from orchestrator.adapters.model_client.reach import ModelUrl, require_reachable
from orchestrator.composition.launch import RunRequest, run_agent
from orchestrator.errors import ModelUnreachable
from orchestrator.exit_codes import ExitCode
from orchestrator.settings import Settings
from tests.processes import run_escrow


def closed_port() -> int:
    """A loopback port that was just bound and released: nothing listens there."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def escrow(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_escrow(home, *argv, timeout=120)


@pytest.mark.parametrize("url", ["127.0.0.1:8088/v1", "localhost:8088/v1", "ftp://127.0.0.1/v1", "http:///v1",
                                 "http://127.0.0.1:notaport/v1"])
def test_a_url_that_is_not_http_is_refused(url: str) -> None:
    with pytest.raises(ModelUnreachable, match="not an http:// or https:// URL"):
        ModelUrl.parse(url)


def test_a_listening_server_passes_and_a_closed_port_does_not() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        require_reachable(f"http://127.0.0.1:{server.getsockname()[1]}/v1")
    with pytest.raises(ModelUnreachable, match="no model server answers"):
        require_reachable(f"http://127.0.0.1:{closed_port()}/v1")
    require_reachable("http://{task_id}.replicas.invalid/v1")  # a per-task host is each run's to reach


@pytest.mark.parametrize("url", ["down", "no scheme"])
def test_escrow_run_says_one_line_and_exits_2_recording_nothing(url: str, tmp_path: Path) -> None:
    model_url = f"http://127.0.0.1:{closed_port()}/v1" if url == "down" else "127.0.0.1:8088/v1"
    repo = tmp_path / "repo"
    repo.mkdir()
    home = tmp_path / "home"
    done = escrow(home, "run", "fix it", "--repo", str(repo), "--verify", "true", "--model-url", model_url)
    assert done.returncode == ExitCode.USAGE, done.stderr
    # One message, folded at words to 80 columns (a pipe's width): its continuations indented.
    lines = done.stderr.splitlines()
    assert done.stdout == "" and done.stderr.startswith("error: ") and all(len(line) <= 80 for line in lines)
    assert all(line.startswith("  ") for line in lines[1:]), done.stderr
    assert not (home / "escrow.db").exists()  # no run recorded (no store even opened)


def test_escrow_batch_refuses_a_down_replica_before_recording_a_batch(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t", "repo": str(tmp_path), "task": "fix it", "verify": "true"}) + "\n")
    home = tmp_path / "home"
    done = escrow(home, "batch", str(tasks), "--model-url", f"http://127.0.0.1:{closed_port()}/v1", "--json")
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert done.stdout == "" and done.stderr.startswith("error: no model server answers")
    with sqlite3.connect(home / "escrow.db") as conn:
        assert conn.execute("select count(*) from batches").fetchone() == (0,)


def test_run_agent_refuses_a_url_without_a_scheme_before_anything_starts(tmp_path: Path) -> None:
    """The library entry point checks the scheme itself (not the reach: a
    batch replica that goes away mid-batch is a recorded TRANSPORT_FAILURE).
    No Docker daemon is asked: the check comes first."""
    settings = Settings(home=tmp_path / "home", model_url="127.0.0.1:8088/v1", docker_host="unix:///nonexistent")
    with pytest.raises(ModelUnreachable):
        run_agent(settings, RunRequest(task="t", repo=tmp_path, verify="true"))
    assert not (tmp_path / "home" / "escrow.db").exists()
