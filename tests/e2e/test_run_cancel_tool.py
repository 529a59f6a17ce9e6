"""Ctrl-C during a long tool command: ``escrow run`` as a real subprocess, the
model (fault server) asks for ``sleep 60``; one SIGINT kills the command's
processes in the sandbox, records the cancel and ends the run CANCELED with no
traceback. Asserts the order of events, not a tight time bound."""

from __future__ import annotations

import json
import signal
import time

import pytest

from orchestrator.adapters.fault_server import FaultServer
from sandbox.hardening import LABEL_PID
from store import Store
from tests.e2e.test_run_cli import escrow_run, tool

pytestmark = [pytest.mark.docker]


def sandbox_running(docker_client, owner_pid: int, marker: str):
    """The run's container once a process whose command line has ``marker`` runs in it."""
    for container in docker_client.containers.list(filters={"label": f"{LABEL_PID}={owner_pid}"}):
        try:
            _, out = container.exec_run(["ps", "-eo", "args="], user="1000:1000")
        except Exception:  # noqa: BLE001 - the container may be going away
            continue
        if marker.encode() in out:
            return container
    return None


@pytest.mark.parametrize("command", ["sleep 60", "trap '' INT TERM; setsid sleep 60 & sleep 60"],
                         ids=["sleep", "setsid-ignoring-signals"])
def test_ctrl_c_during_a_tool_command_cancels_it(tmp_path, repo, fault: FaultServer, sandbox_image, docker_client,
                                                  command):
    fault.script([tool("bash", command=command), tool("submit", summary="never asked for")])
    home = tmp_path / "home"
    proc = escrow_run(home, repo, fault.base_url)
    try:
        deadline = time.monotonic() + 90
        container = None
        while container is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command never started"
            container = sandbox_running(docker_client, proc.pid, "sleep 60")
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=45)
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()

    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    shown = json.loads(out)
    assert shown["verdict"] == "CANCELED" and "tool call" in shown["detail"]
    assert waited < 60, "the command ran to its end instead of being killed"
    assert fault.pending == 1, "no model call after the cancel"
    with Store.open(f"sqlite:///{home / 'escrow.db'}", readonly=True, create=False) as store:
        traj = store.trajectory(shown["run_id"])
        assert traj.run.status == "finished" and traj.run.verdict == "CANCELED"
        (turn,) = [t for t in traj.turns if t.calls]
        (execution,) = turn.tool_executions
        detail = json.loads(execution.detail_json)
        assert detail["canceled"] is True and not detail["timed_out"]
        assert "(killed: run canceled)" in execution.observation
        # The command's record, then the cancel, then the verdict.
        assert [e.kind for e in turn.events][-1] == "cancel"
        assert [e.kind for e in traj.run_events][-1] == "verdict"
        assert store.verify(traj.run.id).ok
    # The sandbox went with the run; nothing of it is left running.
    assert not docker_client.containers.list(all=True, filters={"label": f"{LABEL_PID}={proc.pid}"})
