"""``escrow sandbox`` commands, in-process and as real subprocesses (no traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app

ESCROW = Path(sys.executable).with_name("escrow")


def run_escrow(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ESCROW), *args], capture_output=True, text=True, env={**os.environ, **env}, timeout=120)


def test_dead_daemon_is_a_clear_error(tmp_path):
    for command in (["sandbox", "doctor"], ["sandbox", "build"], ["sandbox", "gc"]):
        proc = run_escrow(*command, DOCKER_HOST=f"unix://{tmp_path}/dead.sock")
        assert proc.returncode == 69, proc.stderr
        assert "cannot reach the Docker daemon" in proc.stderr and "Traceback" not in proc.stderr
        assert "dead.sock" in proc.stderr


@pytest.mark.docker
def test_missing_image_is_a_clear_error(docker_client):
    proc = run_escrow("sandbox", "doctor", "--image", "escrow-sandbox:does-not-exist")
    assert proc.returncode == 67 and "Traceback" not in proc.stderr + proc.stdout
    assert "escrow sandbox build --image escrow-sandbox:does-not-exist" in proc.stdout


@pytest.mark.docker
def test_doctor_json_reports_every_check_ok(sandbox_image):
    result = CliRunner().invoke(app, ["sandbox", "doctor", "--image", sandbox_image, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    names = {c["name"] for c in report["checks"]}
    assert report["ok"] and {"inside capeff", "inside egress", "inspect HostConfig.CapDrop", "inside timeout",
                             "inside no survivors", "inside main process", "acl resolved paths",
                             "inspect HostConfig.PidsLimit", "inspect Config.User"} <= names
    assert {"exit export", "exit diff", "exit verifier", "exit host git"} <= names
    assert {"executor identity", "executor signals", "executor ptrace", "executor /proc", "command descriptors",
            "command capabilities"} <= names


@pytest.mark.docker
def test_doctor_reads_at_80_columns_in_a_pipe(sandbox_image):
    """Piped, the report is 80 columns wide: long details (the executor's
    argv, the tmpfs options) wrap whole, and the script is named by digest."""
    proc = run_escrow("sandbox", "doctor", "--image", sandbox_image, COLUMNS="80")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, [line for line in lines if len(line) > 80]
    shown = " ".join(line.strip() for line in lines)
    assert "characters, sha256" in shown and "import ctypes" not in shown
    assert "/workspace':" in shown and "uid=1000,gid=1000,mode=0755'}" in shown


@pytest.mark.docker
def test_build_reuses_existing_image(sandbox_image):
    result = CliRunner().invoke(app, ["sandbox", "build", "--image", sandbox_image, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["reused_image"] is True


def _dead_owner_labels(run_id: str) -> dict[str, str]:
    """Owner labels of a process that has exited, as a crashed run leaves them."""
    from sandbox.hardening import LABEL_PID, LABEL_PID_START
    from sandbox.orphans import owner_labels, process_start

    proc = subprocess.Popen(["sleep", "60"])
    start = process_start(proc.pid)
    proc.kill()
    proc.wait()
    assert start is not None and process_start(proc.pid) != start
    return {**owner_labels(run_id), LABEL_PID: str(proc.pid), LABEL_PID_START: start}


@pytest.mark.solo  # a sandbox started beside it could sweep the orphan first
@pytest.mark.docker
def test_gc_json_removes_a_dead_runs_container_and_spares_a_live_one(docker_client, sandbox_image):
    import uuid

    from sandbox.orphans import owner_labels

    tag = uuid.uuid4().hex[:12]
    owners = {"dead": _dead_owner_labels(f"dead-{tag}"), "live": owner_labels(f"live-{tag}")}
    made = {
        kind: docker_client.containers.create(
            sandbox_image, command=["true"], labels=labels, name=f"escrow-gc-{kind}-{tag}"
        )
        for kind, labels in owners.items()
    }
    try:
        result = CliRunner().invoke(app, ["sandbox", "gc", "--json"])
        assert result.exit_code == 0, result.output
        removed = json.loads(result.stdout)["removed"]
        assert made["dead"].name in removed and made["live"].name not in removed
        names = {c.name for c in docker_client.containers.list(all=True, filters={"name": tag})}
        assert names == {made["live"].name}
    finally:
        for container in made.values():
            try:
                container.remove(force=True)
            except Exception:  # already removed by gc
                pass
