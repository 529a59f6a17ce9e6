"""Configuration flows one way: the environment is read once, into Settings.
Docker's own DOCKER_HOST is taken there too, and the sandbox's connect reads
no variable of its own."""

from __future__ import annotations

import pytest

from orchestrator.settings import load_settings
from sandbox import connect
from sandbox.errors import DaemonUnavailable


def test_docker_host_is_read_into_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path))
    monkeypatch.setenv("DOCKER_HOST", "unix:///nowhere/docker.sock")
    assert load_settings(None).docker_host == "unix:///nowhere/docker.sock"
    # A flag or ESCROW_DOCKER_HOST wins over Docker's variable.
    assert load_settings(None, docker_host="tcp://127.0.0.1:1").docker_host == "tcp://127.0.0.1:1"
    monkeypatch.setenv("ESCROW_DOCKER_HOST", "unix:///elsewhere.sock")
    assert load_settings(None).docker_host == "unix:///elsewhere.sock"


def test_connect_reads_no_environment(monkeypatch, tmp_path, docker_client):
    """A dead DOCKER_HOST in the environment does not reach connect(): with
    no host given it reaches the local socket, where the daemon answers."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")
    assert connect(None, timeout=10).ping()
    with pytest.raises(DaemonUnavailable) as refused:
        connect(f"unix://{tmp_path}/also-dead.sock", timeout=2)
    assert "also-dead.sock" in str(refused.value)
