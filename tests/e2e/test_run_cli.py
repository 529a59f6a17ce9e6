"""``escrow run`` as a real subprocess against the fault-injection server:
the JSON outcome, the exit code, and Ctrl-C mid-stream ending as CANCELED
with no traceback."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer, Reply, ScriptedToolCall
from orchestrator.errors import ConfigError
from store import Store
from tests.batch.docker_proxy import StallingDockerProxy
from tests.view.conftest import serving

pytestmark = [pytest.mark.docker]

ESCROW = Path(sys.executable).parent / "escrow"


def escrow_run(home: Path, repo: Path, url: str, *extra: str, docker_host: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "ESCROW_HOME": str(home), **({"DOCKER_HOST": docker_host} if docker_host else {})}
    args = [str(ESCROW), "run", "Fix mean() in calc.py", "--repo", str(repo), "--verify", "python3 -m pytest -q",
            "--model-url", url, "--context-window", "8192", "--tokenizer", "cl100k_base", "--json", *extra]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def tool(name: str, **args: object) -> Reply:
    return Reply(tool_calls=(ScriptedToolCall(name=name, arguments=json.dumps(args)),))


def test_cli_run_passes_and_prints_the_outcome(tmp_path, repo, fault: FaultServer, sandbox_image):
    fault.script([
        tool("edit_file", path="calc.py", old="(len(values) + 1)", new="len(values)"),
        tool("submit", summary="fixed"),
    ])
    proc = escrow_run(tmp_path / "home", repo, fault.base_url, "--apply", "--log-json")
    out, err = proc.communicate(timeout=120)

    assert proc.returncode == 0, err
    assert "Traceback" not in err
    shown = json.loads(out)
    assert shown["verdict"] == "PASS" and shown["applied"] is True and shown["patch_files"] == ["calc.py"]
    # Structured progress on stderr: one JSON line per turn, carrying the run id and the turn.
    logs = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    turns = [entry for entry in logs if entry.get("event") == "turn"]
    assert [t["turn"] for t in turns] == [0, 1]
    assert {t["run_id"] for t in turns} == {shown["run_id"]} and all(t["status"] == "COMPLETED" for t in turns)
    assert "return sum(values) / len(values)" in (repo / "calc.py").read_text()
    with Store.open(f"sqlite:///{tmp_path / 'home' / 'escrow.db'}", readonly=True, create=False) as store:
        run = store.run(shown["run_id"])
        assert run.verdict == "PASS" and run.status == "finished"
        assert len(store.calls(run.id)) == 2 and store.verify(run.id).ok
        # No --model: the one model the server lists, sent and recorded (not a default name).
        assert run.request_model == fault.model == "fault-model"
        assert {r.json["model"] for r in fault.requests} == {"fault-model"}


def test_ctrl_c_mid_stream_records_canceled_and_exits_cleanly(tmp_path, repo, fault: FaultServer, sandbox_image):
    # 600 one-character chunks at 20/s: a minute of streaming unless cancelled.
    fault.script([Reply(text="thinking " * 67, chunk_chars=1, tokens_per_s=20.0)])
    proc = escrow_run(tmp_path / "home", repo, fault.base_url)
    try:
        deadline = time.monotonic() + 60
        while not fault.streams or fault.streams[0].chunks_sent < 5:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the stream never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()

    assert proc.returncode == 130, err  # Ctrl-C: the exit code of every interrupted command
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    shown = json.loads(out)
    assert shown["verdict"] == "CANCELED"
    (gone,) = fault.wait_disconnects(1)
    assert gone.chunks_sent < gone.planned_chunks and len(fault.requests) == 1  # mid-stream, not before
    with Store.open(f"sqlite:///{tmp_path / 'home' / 'escrow.db'}", readonly=True, create=False) as store:
        run = store.run(shown["run_id"])
        assert run.status == "finished" and run.verdict == "CANCELED"
        (call,) = store.calls(run.id)
        assert call.response is not None and call.response.status == "CANCELED"
        assert store.verify(run.id).ok


def _first_run_id(db: Path) -> str | None:
    try:
        with Store.open(f"sqlite:///{db}", readonly=True, create=False) as store:
            runs = store.runs()
    except Exception:  # the store is still being created by the run
        return None
    return runs[0].run.id if runs else None


def _run_containers(run_id: str) -> list[str]:
    import docker

    client = docker.from_env(timeout=30)
    return [c.id for c in client.containers.list(all=True, filters={"label": f"escrow.run_id={run_id}"})]


def test_ctrl_c_while_the_sandbox_starts_is_a_recorded_cancel(tmp_path, repo, fault: FaultServer, sandbox_image):
    """Interrupted inside Sandbox.start (its container exists, so the start is
    under way and Ctrl-C only sets the cancel): the run ends CANCELED before
    its first turn. What tells this case from a cancel mid-stream is causal:
    the model server never saw a request, and no call is recorded. A proxy in
    front of dockerd holds the container's start until the signal is sent, so
    the start is under way at the signal however fast the machine is."""
    fault.script([Reply(text="slow " * 100, chunk_chars=1, tokens_per_s=20.0)])
    home = tmp_path / "home"
    with StallingDockerProxy(tmp_path / "docker.sock", stall=1, holds=b"/start") as proxy:
        proc = escrow_run(home, repo, fault.base_url, docker_host=proxy.url)
        try:
            deadline = time.monotonic() + 60
            while not proxy.stalled:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the sandbox's container was never started"
                time.sleep(0.01)
            run_id = _first_run_id(home / "escrow.db")
            assert run_id is not None and _run_containers(run_id), "the held start has no container"
            # The handler runs at the signal (or as the held call returns), long before the first turn.
            proc.send_signal(signal.SIGINT)
            proxy.release.set()
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()

    assert proc.returncode == 130, err
    assert "Traceback" not in err
    shown = json.loads(out)
    assert (shown["run_id"], shown["verdict"], shown["turns"]) == (run_id, "CANCELED", 0)
    assert shown["detail"] == "canceled before the next turn"
    assert fault.requests == []  # the model was never asked
    assert _run_containers(run_id) == []  # and the sandbox that did start was removed
    with Store.open(f"sqlite:///{home / 'escrow.db'}", readonly=True, create=False) as store:
        run = store.run(run_id)
        assert run.status == "finished" and run.verdict == "CANCELED"
        assert store.calls(run_id) == [] and store.verify(run_id).ok


def test_cli_runner_prints_the_verdict_panel_and_rejects_a_missing_repo(
    tmp_path, repo, fault: FaultServer, sandbox_image
):
    fault.script([Reply(text="All done!")])
    common = ["--verify", "python3 -m pytest -q", "--model-url", fault.base_url, "--context-window", "8192",
              "--tokenizer", "cl100k_base", "--max-turns", "1"]
    env = {"ESCROW_HOME": str(tmp_path / "home")}
    runner = CliRunner()
    result = runner.invoke(app, ["run", "Fix mean()", "--repo", str(repo), *common], env=env)
    assert result.exit_code == 1, result.output
    assert "BUDGET_EXHAUSTED" in result.output and "(no changes)" in result.output

    missing = runner.invoke(app, ["run", "Fix mean()", "--repo", str(tmp_path / "nope"), *common], env=env)
    assert isinstance(missing.exception, ConfigError) and "is not a directory" in str(missing.exception)


def test_cli_apply_refuses_a_ci_patch_with_exit_77(tmp_path, repo, fault: FaultServer, sandbox_image):
    fault.script([Reply(tool_calls=(
        ScriptedToolCall(name="edit_file", arguments=json.dumps(
            {"path": "calc.py", "old": "(len(values) + 1)", "new": "len(values)"})),
        ScriptedToolCall(name="write_file", arguments=json.dumps(
            {"path": ".github/workflows/x.yml", "content": "on: push\n"})),
        ScriptedToolCall(name="submit", arguments="{}"),
    ))])
    before = (repo / "calc.py").read_text()
    proc = escrow_run(tmp_path / "home", repo, fault.base_url, "--apply")
    out, err = proc.communicate(timeout=180)

    assert proc.returncode == 77, err
    assert "Traceback" not in err and "--apply refused" in err and "CI configuration" in err
    shown = json.loads(out)
    assert shown["verdict"] == "PASS" and shown["applied"] is False
    assert [(f["path"], f["reason"]) for f in shown["flagged"]] == [(".github/workflows/x.yml", "CI configuration")]
    assert "CI configuration" in shown["apply_refused"]
    assert (repo / "calc.py").read_text() == before and not (repo / ".github").exists()


# None: no --runtime, so the default (auto), which is runsc wherever dockerd
# has it, as in CI (the default_runtime fixture fails CI without it).
@pytest.mark.parametrize("asked", ["runsc", "runc", None], ids=["runsc", "runc", "default"])
def test_a_run_under_a_runtime_passes_records_it_and_show_prints_it(tmp_path, repo, fault: FaultServer,
                                                                    sandbox_image, asked, default_runtime,
                                                                    monkeypatch):
    runtime = asked or default_runtime
    fault.script([
        tool("bash", command="dmesg | head -1"),
        tool("edit_file", path="calc.py", old="(len(values) + 1)", new="len(values)"),
        tool("submit", summary="fixed"),
    ])
    monkeypatch.delenv("ESCROW_SANDBOX_RUNTIME", raising=False)
    proc = escrow_run(tmp_path / "home", repo, fault.base_url, *(("--runtime", asked) if asked else ()))
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    run_id = json.loads(out)["run_id"]
    with Store.open(f"sqlite:///{tmp_path / 'home' / 'escrow.db'}", readonly=True, create=False) as store:
        assert json.loads(store.run(run_id).config_json)["sandbox_runtime"] == runtime
    shown = subprocess.run([str(ESCROW), "show", run_id, "--full"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "ESCROW_HOME": str(tmp_path / "home")})
    assert shown.returncode == 0, shown.stderr
    assert f"sandbox: {runtime}" in shown.stdout
    assert ("sandbox: runsc (gVisor)" in shown.stdout) == (runtime == "runsc")
    assert ("Starting gVisor" in shown.stdout) == (runtime == "runsc")  # the bash call's output, from inside
    env = {**os.environ, "ESCROW_HOME": str(tmp_path / "home")}
    report = subprocess.run([str(ESCROW), "report", run_id], capture_output=True, text=True, timeout=60, env=env)
    assert report.returncode == 0, report.stderr
    label = "runsc (gVisor)" if runtime == "runsc" else "runc"
    assert f"\nsandbox {label}\n" in report.stdout
    as_json = subprocess.run([str(ESCROW), "report", run_id, "--json"], capture_output=True, text=True, timeout=60,
                             env=env)
    assert json.loads(as_json.stdout)["sandbox_runtime"] == runtime
    with serving(tmp_path / "home" / "escrow.db") as base:
        page = httpx.get(f"{base}/run/{run_id}", timeout=30).text
    assert re.search(rf'id="run-sandbox"><b>sandbox</b> {re.escape(label)}</span>', page), page[:2000]


def test_an_unknown_context_window_is_named_before_any_container_is_created(
    tmp_path, repo, fault: FaultServer, sandbox_image
):
    """Issue 42, group 13: the missing window names --context-window, and is
    found before the sandbox starts. Every Docker request of the command
    goes through a proxy: it reached dockerd (the image check) and created
    no container, and the model was never asked."""
    home = tmp_path / "home"
    env = {**os.environ, "ESCROW_HOME": str(home), "COLUMNS": "80"}
    args = [str(ESCROW), "run", "Fix mean() in calc.py", "--repo", str(repo), "--verify", "true",
            "--model-url", fault.base_url, "--tokenizer", "cl100k_base"]  # the fault server reports no window
    with StallingDockerProxy(tmp_path / "docker.sock", stall=0) as proxy:
        done = subprocess.run(args, env={**env, "DOCKER_HOST": proxy.url}, capture_output=True, text=True,
                              timeout=120)
        creates = proxy.creates
    said = " ".join(done.stderr.split())
    assert done.returncode == 2 and "give --context-window N" in said and "Traceback" not in said, done.stderr
    assert proxy.requested, "the command never reached dockerd through the proxy"
    assert creates == 0 and fault.requests == []
    with Store.open(f"sqlite:///{home / 'escrow.db'}", readonly=True, create=False) as store:
        assert store.runs() == []  # nothing recorded either
