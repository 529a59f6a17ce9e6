"""A run SIGKILLed at each phase of a turn reads ``crashed`` once its lease
lapses, with the moment it was last alive, in ``runs`` (both readers, and
``--status``), ``show``, ``report`` and the viewer's reads; while it lived,
the same readers said ``running``. Each run is a real subprocess against the
fault server and the Docker sandbox, killed during its model call, its tool
command, its verification, and at a turn's end (its tool done, the next
model call not made). Here: a plain ``escrow run``, and a fork and a
re-execution of a recorded run; tests/batch/test_killed_batch_runs.py kills
batch runs, on the local pool and on Ray, at the same phases."""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker.errors
import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from cli.main import app
from cli.view.app import create_app
from orchestrator.adapters.fault_server import FaultServer, Reply
from sandbox.hardening import LABEL_PID, LABEL_ROLE, LABEL_RUN
from sandbox.orphans import removal_under_way
from store import Store
from tests.container_processes import commands_in
from tests.processes import IN_PROCESS, cli_env, start_escrow
from tests.replay.test_killed_run import EXAMPLE, tool

pytestmark = [pytest.mark.docker]

LEASE_S = 3.0
VERIFY = "python3 -m pytest -q"


@dataclass(frozen=True)
class Phase:
    """Where a run is killed: what the model says, what verifies, and the
    command text that shows the run is there (None: its model call)."""

    script: tuple[Reply, ...]
    verify: str = VERIFY
    running: str | None = None
    turn_end: bool = False


PHASES = {
    "model call": Phase((Reply(text="slow", delay_s=120),)),
    "tool command": Phase((tool("bash", command="sleep 61"), tool("submit", summary="done")), running="sleep 61"),
    "verification": Phase((tool("submit", summary="done"),), verify=f"sleep 62; {VERIFY}", running="sleep 62"),
    # The tool ends on its own; the store is then held, so the turn cannot
    # end and the next model call cannot start: the kill lands between them.
    "turn end": Phase((tool("bash", command="sleep 8"), Reply(text="slow", delay_s=120)), running="sleep 8",
                      turn_end=True),
}


def home_for(tmp: Path, image: str) -> dict[str, str]:
    """A home whose store is ``store_url(tmp)``, and the environment that selects it."""
    for folder in ("tmp", "home"):
        (tmp / folder).mkdir(exist_ok=True)
    (tmp / "home" / "config.toml").write_text(f'sandbox_image = "{image}"\n')
    return cli_env(tmp / "home", TMPDIR=str(tmp / "tmp"), ESCROW_LEASE_S=str(LEASE_S))


def example_repo(tmp: Path) -> Path:
    repo = tmp / "calculator"
    if not repo.exists():
        shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns(".benchmarks", "__pycache__", ".pytest_cache"))
    return repo


def escrow(env: dict[str, str], *args: str) -> subprocess.Popen:
    return start_escrow(None, *args, env=env, entry=IN_PROCESS, merge_stderr=True)


RUN_FLAGS = ("--tokenizer", "cl100k_base", "--context-window", "8192", "--max-tokens", "256", "--max-turns", "4")


def start_run(tmp: Path, server: FaultServer, image: str, verify: str) -> subprocess.Popen:
    env = home_for(tmp, image)
    return escrow(env, "run", "fix mean()", "--repo", str(example_repo(tmp)), "--verify", verify,
                  "--model-url", server.base_url, *RUN_FLAGS)


def wait_until(proc: subprocess.Popen, reached: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        if reached():
            return
        time.sleep(0.1)
    pytest.fail(f"the run never reached {what}")


def container_runs(docker_client, text: str, owner_pid: int | None = None) -> Callable[[], bool]:
    """Whether a sandbox runs ``text``: one of ``owner_pid``'s, or of any owner
    (a batch's run may live in a Ray worker)."""
    label = f"{LABEL_ROLE}=1" if owner_pid is None else f"{LABEL_PID}={owner_pid}"

    def running() -> bool:
        return any(text in command for container in docker_client.containers.list(filters={"label": label})
                   for command in commands_in(container))
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
    """What every reader says of the newest run, all the same ``status``."""
    run = listed(tmp)[0]
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


@contextmanager
def reach(phase: Phase, proc: subprocess.Popen, server: FaultServer, docker_client, tmp: Path,
          calls_before: int = 0, own_sandbox: bool = False) -> Iterator[None]:
    """Wait until the run is in ``phase`` (``calls_before``: the model calls
    the server saw before it; ``own_sandbox``: look only in ``proc``'s
    sandboxes, not in every one on a shared machine); for a turn's end, hold
    the store (a write lock: readers go on) while the caller kills it, so the
    run can neither end its turn nor start the next call."""
    if phase.running is None:
        wait_until(proc, lambda: len(server.requests) > calls_before, "its model call")
        yield
        return
    running = container_runs(docker_client, phase.running, proc.pid if own_sandbox else None)
    wait_until(proc, running, phase.running)
    if not phase.turn_end:
        yield
        return
    assert_reads(tmp, "running")  # while it lives, before the store is held
    held = sqlite3.connect(tmp / "home" / "escrow.db", isolation_level=None, timeout=30)
    try:
        held.execute("BEGIN IMMEDIATE")
        wait_until(proc, lambda: not running(), f"{phase.running} to end")
        assert len(server.requests) == calls_before + 1, "the next call was made: the kill is not between turns"
        yield
    finally:
        held.execute("ROLLBACK")
        held.close()


def remove_sandboxes(docker_client, run_ids: list[str]) -> None:
    for run_id in run_ids:
        for found in docker_client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"}):
            try:
                docker_client.api.remove_container(found["Id"], force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as removing:
                # Its own removal (the sandbox's auto-remove, or a sweep) may
                # be under way already: that container is going too.
                if not removal_under_way(removing):
                    raise


def kill(proc: subprocess.Popen) -> float:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return time.time()


def killed_reads_crashed(tmp: Path, proc: subprocess.Popen, docker_client, phase: Phase,
                         server: FaultServer, calls_before: int = 0,
                         kill_run: Callable[[subprocess.Popen], float] = kill) -> None:
    """``kill_run`` kills the run and returns a time by which its process is
    known gone (on Ray the run lives on in a worker for a moment after its
    driver was killed)."""
    with reach(phase, proc, server, docker_client, tmp, calls_before):
        if not phase.turn_end:
            alive = assert_reads(tmp, "running")
            assert alive["last_alive_at"] is None
        killed_at = kill_run(proc)
    reads_crashed(tmp, docker_client, killed_at)


def reads_crashed(tmp: Path, docker_client, killed_at: float, timeout_s: float = 120) -> None:
    """The newest run reads crashed, everywhere, once its lease lapsed."""
    try:
        deadline = time.monotonic() + timeout_s
        while (newest := listed(tmp)[0])["status"] != "crashed":
            # A run that recorded an end of its own after the kill reads finished: not a lapse.
            assert newest["status"] == "running", f"the killed run ended on its own: {newest}"
            assert time.monotonic() < deadline, f"the killed run's lease never lapsed: {newest}"
            time.sleep(0.5)
        run = assert_reads(tmp, "crashed")
        # Last alive: after the run started, and no later than its process was killed.
        assert run["created_at"] <= run["last_alive_at"] <= killed_at
        assert f"{run['id'][:12]} crashed: its process is gone; last alive" in cli(tmp, "runs").output
        shown = " ".join(cli(tmp, "show", run["id"]).output.split())  # show folds its lines to the width
        assert "crashed" in shown and "last alive" in shown and "still running" not in shown
        assert "crashed: its process is gone; last alive" in cli(tmp, "report", run["id"]).output
        with Store.open(store_url(tmp), readonly=True, create=False) as store:
            client = TestClient(create_app(store))
            page = client.get(f"/run/{run['id']}")
            assert page.status_code == 200 and "crashed" in page.text and "last alive" in page.text
            assert "crashed" in client.get("/").text
    finally:
        remove_sandboxes(docker_client, [r["id"] for r in listed(tmp)])


@pytest.mark.parametrize("phase", list(PHASES))
def test_a_plain_run_killed_reads_crashed(phase, tmp_path, fault_server, sandbox_image, docker_client):
    fault_server.script(list(PHASES[phase].script))
    proc = start_run(tmp_path, fault_server, sandbox_image, PHASES[phase].verify)
    killed_reads_crashed(tmp_path, proc, docker_client, PHASES[phase], fault_server)


def recorded_parent(tmp: Path, server: FaultServer, image: str) -> str:
    """A finished run to replay: a 4.5 s command, then submit."""
    server.script([tool("bash", command="sleep 4.5"), tool("submit", summary="done")])
    proc = start_run(tmp, server, image, VERIFY)
    out, _ = proc.communicate(timeout=300)
    (parent,) = listed(tmp)
    assert parent["status"] == "finished", out
    return str(parent["id"])


def test_a_fork_killed_during_its_live_model_call_reads_crashed(tmp_path, fault_server, sandbox_image,
                                                                docker_client):
    parent = recorded_parent(tmp_path, fault_server, sandbox_image)
    fault_server.script([Reply(text="slow", delay_s=120)])
    before = len(fault_server.requests)
    proc = escrow(home_for(tmp_path, sandbox_image), "replay", parent, "--fork-at", "1",
                  "--model-url", fault_server.base_url)
    killed_reads_crashed(tmp_path, proc, docker_client, PHASES["model call"], fault_server, before)
    fork = listed(tmp_path)[0]
    assert fork["id"] != parent and fork["status"] == "crashed"


def test_a_reexecution_killed_during_its_tool_command_reads_crashed(tmp_path, fault_server, sandbox_image,
                                                                    docker_client):
    parent = recorded_parent(tmp_path, fault_server, sandbox_image)
    proc = escrow(home_for(tmp_path, sandbox_image), "replay", parent, "--reexecute")
    killed_reads_crashed(tmp_path, proc, docker_client, Phase((), running="sleep 4.5"), fault_server)
    assert listed(tmp_path)[0]["id"] != parent
