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
    report = json.loads(result.output)
    names = {c["name"] for c in report["checks"]}
    assert report["ok"] and {"inside capeff", "inside egress", "inspect HostConfig.CapDrop", "inside timeout",
                             "inside no survivors", "inside main process", "acl resolved paths",
                             "inspect HostConfig.PidsLimit", "inspect Config.User"} <= names


@pytest.mark.docker
def test_build_reuses_existing_image(sandbox_image):
    result = CliRunner().invoke(app, ["sandbox", "build", "--image", sandbox_image, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["reused_image"] is True


@pytest.mark.docker
def test_gc_json(docker_client):
    result = CliRunner().invoke(app, ["sandbox", "gc", "--json"])
    assert result.exit_code == 0 and "removed" in json.loads(result.output)
