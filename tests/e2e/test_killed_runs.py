"""A plain ``escrow run`` SIGKILLed at each phase of a turn reads ``crashed``
once its lease lapses, with the moment it was last alive, in ``runs`` (both
readers, and ``--status``), ``show``, ``report`` and the viewer's reads; while
it lived, the same readers said ``running``. The run is a real subprocess
against the fault server and the Docker sandbox, killed during its model
call, its tool command and its verification."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import docker.errors
import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from cli.main import app
from cli.view.app import create_app
from orchestrator.fault_server import FaultServer, Reply
from sandbox.hardening import LABEL_PID
from store import Store
from tests.replay.test_killed_run import EXAMPLE, tool

pytestmark = [pytest.mark.docker]

LEASE_S = 3.0


def start_run(tmp: Path, server: FaultServer, image: str, verify: str) -> subprocess.Popen:
    repo = tmp / "calculator"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns(".benchmarks", "__pycache__", ".pytest_cache"))
    for folder in ("tmp", "home"):
        (tmp / folder).mkdir()
    (tmp / "home" / "config.toml").write_text(f'sandbox_image = "{image}"\n')
    env = {**os.environ, "ESCROW_HOME": str(tmp / "home"), "TMPDIR": str(tmp / "tmp"),
           "ESCROW_LEASE_S": str(LEASE_S)}
    env.pop("ESCROW_DB_URL", None)
    return subprocess.Popen(
        [sys.executable, "-c", "from cli.main import main; main()", "run", "fix mean()", "--repo", str(repo),
         "--verify", verify, "--model-url", server.base_url, "--tokenizer", "cl100k_base",
         "--context-window", "8192", "--max-tokens", "256", "--max-turns", "4"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_until(proc: subprocess.Popen, reached: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        if reached():
            return
        time.sleep(0.1)
    pytest.fail(f"the run never reached {what}")


def container_runs(docker_client, proc: subprocess.Popen, text: str) -> Callable[[], bool]:
    def running() -> bool:
        for container in docker_client.containers.list(filters={"label": f"{LABEL_PID}={proc.pid}"}):
            try:
                processes = container.top().get("Processes") or []
            except Exception:  # noqa: BLE001 - the container is still starting or already going
                continue
            if any(text in " ".join(p) for p in processes):
                return True
        return False
    return running


def cli(tmp: Path, *args: str):
    result = CliRunner().invoke(app, [*args, "--db", f"sqlite:///{tmp / 'home' / 'escrow.db'}"])
    assert result.exit_code == 0, result.output
    return result


def listed(tmp: Path, *args: str) -> list[dict]:
    return json.loads(cli(tmp, "runs", "--json", *args).stdout)


def store_url(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'home' / 'escrow.db'}"


def assert_reads(tmp: Path, status: str) -> dict:
    """What every reader says of the one run, all the same ``status``."""
    (run,) = listed(tmp)
    other = "crashed" if status == "running" else "running"
    assert run["status"] == status
    assert [r["id"] for r in listed(tmp, "--status", status)] == [run["id"]]
    assert listed(tmp, "--status", other) == []
    report = json.loads(cli(tmp, "report", run["id"], "--json").stdout)
    assert report["status"] == status and report["last_alive_at"] == run["last_alive_at"]
    with Store.open(store_url(tmp), readonly=True, create=False) as store:
        # The full store's reader (`runs` on PostgreSQL) says the same as the light one.
        assert [(s.run.status, s.run.last_alive_at) for s in store.runs(status=status)] == [
            (status, run["last_alive_at"])]
        assert store.trajectory(run["id"]).run.status == status  # the viewer's run page
        assert [s.run.status for s in store.summaries([run["id"]])] == [status]  # its runs page
    return run


def killed_reads_crashed(tmp: Path, proc: subprocess.Popen, docker_client) -> None:
    alive = assert_reads(tmp, "running")
    assert alive["last_alive_at"] is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = time.time()
    try:
        deadline = time.monotonic() + 120
        while listed(tmp)[0]["status"] != "crashed":
            assert time.monotonic() < deadline, "the killed run's lease never lapsed"
            time.sleep(0.5)
        run = assert_reads(tmp, "crashed")
        # Last alive: after the run started, and no later than its process was killed.
        assert run["created_at"] <= run["last_alive_at"] <= killed_at
        assert f"{run['id'][:12]} crashed: its process is gone; last alive" in cli(tmp, "runs").output
        shown = cli(tmp, "show", run["id"]).output
        assert "crashed" in shown and "last alive" in shown and "still running" not in shown
        assert "crashed: its process is gone; last alive" in cli(tmp, "report", run["id"]).output
        with Store.open(store_url(tmp), readonly=True, create=False) as store:
            client = TestClient(create_app(store))
            page = client.get(f"/run/{run['id']}")
            assert page.status_code == 200 and "crashed" in page.text and "last alive" in page.text
            assert "crashed" in client.get("/").text
    finally:
        for found in docker_client.api.containers(all=True, filters={"label": f"{LABEL_PID}={proc.pid}"}):
            try:
                docker_client.api.remove_container(found["Id"], force=True)
            except docker.errors.NotFound:
                pass


def test_a_run_killed_during_its_model_call_reads_crashed(tmp_path, fault_server, sandbox_image, docker_client):
    fault_server.script([Reply(text="slow", delay_s=120)])
    proc = start_run(tmp_path, fault_server, sandbox_image, "python3 -m pytest -q")
    wait_until(proc, lambda: len(fault_server.requests) >= 1, "its model call")
    killed_reads_crashed(tmp_path, proc, docker_client)


def test_a_run_killed_during_its_tool_command_reads_crashed(tmp_path, fault_server, sandbox_image, docker_client):
    fault_server.script([tool("bash", command="sleep 61"), tool("submit", summary="done")])
    proc = start_run(tmp_path, fault_server, sandbox_image, "python3 -m pytest -q")
    wait_until(proc, container_runs(docker_client, proc, "sleep 61"), "its tool command")
    killed_reads_crashed(tmp_path, proc, docker_client)


def test_a_run_killed_during_its_verification_reads_crashed(tmp_path, fault_server, sandbox_image, docker_client):
    fault_server.script([tool("submit", summary="done")])
    proc = start_run(tmp_path, fault_server, sandbox_image, "sleep 62; python3 -m pytest -q")
    wait_until(proc, container_runs(docker_client, proc, "sleep 62"), "its verification")
    killed_reads_crashed(tmp_path, proc, docker_client)
