"""A run SIGKILLed during its turn-0 tool call, for real: ``escrow run`` as a
subprocess against the scripted fault server and the Docker sandbox, killed
while ``bash "sleep 8"`` runs in its container. What it leaves must read
right: replay says the recording ends there (no divergence), ``show``
explains the uncommitted turn, ``sandbox gc`` and the next run remove its
state directory (and only dead runs' ones)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import docker.errors
import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer, Reply, ScriptedToolCall
from sandbox.hardening import LABEL_PID
from sandbox.orphans import OWNER_FILE, claim_state_dir, removal_under_way
from store import Store
from tests.container_processes import commands_in
from tests.processes import IN_PROCESS, cli_env, start_escrow

pytestmark = [pytest.mark.docker]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calculator"
RECORDING_ENDS = 9


def tool(name: str, **args: object) -> Reply:
    return Reply(tool_calls=(ScriptedToolCall(name=name, arguments=json.dumps(args)),))


def escrow(tmp: Path, *args: str) -> subprocess.Popen:
    return start_escrow(None, *args, env=cli_env(tmp / "home", TMPDIR=str(tmp / "tmp")), entry=IN_PROCESS,
                        merge_stderr=True)


def start_run(tmp: Path, server: FaultServer, image: str) -> subprocess.Popen:
    repo = tmp / "calculator"
    if not repo.exists():
        shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns(".benchmarks", "__pycache__", ".pytest_cache"))
    (tmp / "tmp").mkdir(exist_ok=True)
    (tmp / "home").mkdir(exist_ok=True)
    (tmp / "home" / "config.toml").write_text(f'sandbox_image = "{image}"\n')
    return escrow(tmp, "run", "fix mean()", "--repo", str(repo), "--verify", "python3 -m pytest -q",
                  "--model-url", server.base_url, "--tokenizer", "cl100k_base", "--context-window", "8192",
                  "--max-tokens", "256", "--max-turns", "4")


def kill_during_sleep(proc: subprocess.Popen, docker_client) -> None:
    """SIGKILL ``proc`` once its sandbox container runs ``sleep 8``."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        for container in docker_client.containers.list(filters={"label": f"{LABEL_PID}={proc.pid}"}):
            if any("sleep 8" in command for command in commands_in(container)):
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return
        time.sleep(0.2)
    pytest.fail("the run never reached its sleep 8 tool call")


def invoke(tmp: Path, *args: str):
    return CliRunner().invoke(app, [*args, "--db", f"sqlite:///{tmp / 'home' / 'escrow.db'}"])


@pytest.fixture
def killed(tmp_path, fault_server, sandbox_image, docker_client):
    fault_server.script([tool("bash", command="sleep 8"), tool("submit", summary="done")])
    proc = start_run(tmp_path, fault_server, sandbox_image)
    kill_during_sleep(proc, docker_client)
    with Store.open(f"sqlite:///{tmp_path / 'home' / 'escrow.db'}", readonly=True, create=False) as store:
        (summary,) = store.runs()
    yield tmp_path, summary.run.id
    # The killed run's container, unless a gc under test took it already,
    # or a sandbox started beside this test is sweeping it now (409).
    for found in docker_client.api.containers(all=True, filters={"label": f"{LABEL_PID}={proc.pid}"}):
        try:
            docker_client.api.remove_container(found["Id"], force=True)
        except docker.errors.NotFound:
            pass  # another process's gc was first
        except docker.errors.APIError as removing:
            if not removal_under_way(removing):
                raise


def test_a_run_killed_during_a_tool_call_replays_to_where_its_recording_ends(killed):
    tmp, run_id = killed
    assert invoke(tmp, "verify", run_id).exit_code == 0
    for args in (("--no-record",), ()):
        result = invoke(tmp, "replay", run_id, *args)
        assert "DIVERGED" not in result.output, result.output
        assert "the recording ends at turn 0 (the run died)" in result.output, result.output
        assert result.exit_code == RECORDING_ENDS, result.output
    as_json = json.loads(invoke(tmp, "replay", run_id, "--no-record", "--json").stdout)
    assert as_json["recording_ends_at"] == 0 and as_json["divergence"] is None and as_json["identical"]
    assert [t["identical"] for t in as_json["turns"]] == [True], "turn 0's request was replayed and checked"


def test_show_explains_the_uncommitted_turn_of_a_killed_run(killed):
    tmp, run_id = killed
    result = invoke(tmp, "show", run_id)
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())  # show folds its lines to the width
    assert "turn 0: not committed" in out
    assert "the request and the envelope are each committed the moment they happen" in out
    assert "proposed tool call 0 (never committed): bash" in out and "sleep 8" in out
    assert "COMPLETED" in out, "the envelope of the killed turn is recorded"
    assert "no verdict recorded" in out  # running until its lease lapses, then crashed (tests/e2e/test_killed_runs.py)


def state_dirs(tmp: Path, run_id: str) -> list[Path]:
    return sorted((tmp / "tmp").glob(f"escrow-{run_id[:12]}-*"))


def test_sandbox_gc_removes_the_state_directory_of_the_dead_run_only(killed):
    tmp, run_id = killed
    # The run's sandbox and its verifier's container started early: each
    # has a state directory, each claimed by the run's process.
    left = state_dirs(tmp, run_id)
    assert left and all((d / OWNER_FILE).exists() for d in left), left
    live = tmp / "tmp" / "escrow-0123456789ab-live"
    live.mkdir()
    claim_state_dir(live, "0123456789ab" * 2)  # owned by this (live) test process
    gc = escrow(tmp, "sandbox", "gc", "--json")
    out, _ = gc.communicate(timeout=300)
    assert gc.returncode == 0, out
    removed = json.loads(out.strip().splitlines()[-1])["removed_state_dirs"]
    assert all(str(d) in removed for d in left), (left, removed)
    assert not any(d.exists() for d in left) and live.exists()


def test_the_next_run_removes_the_state_directory_of_a_dead_run(killed, fault_server, sandbox_image):
    tmp, run_id = killed
    left = state_dirs(tmp, run_id)
    assert left
    fault_server.script([tool("submit", summary="nothing")])
    proc = start_run(tmp, fault_server, sandbox_image)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode in (0, 1), out
    assert not any(d.exists() for d in left), left
