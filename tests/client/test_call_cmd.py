"""``escrow call`` and ``escrow fault-server``, in-process and as subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import Fault, Reply, Script
from orchestrator.errors import ConfigError

ESCROW = str(Path(sys.executable).with_name("escrow"))
runner = CliRunner()


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path / "home"))


def test_call_prints_the_envelope_as_json(srv):
    srv.script([Reply(text="hello from the script")])
    result = runner.invoke(
        app, ["call", "hi", "--model-url", srv.base_url, "--model", "m1", "--max-tokens", "7", "--json"]
    )
    assert result.exit_code == 0, result.output
    env = json.loads(result.stdout)
    assert env["status"] == "COMPLETED" and env["payload"]["text"] == "hello from the script"
    sent = srv.requests[0].json
    assert (sent["model"], sent["max_tokens"], sent["stream"]) == ("m1", 7, True)


def test_call_table_output_and_non_completed_exit_code(srv):
    srv.script([Fault.truncated("rm -rf /tmp/scr")])
    result = runner.invoke(app, ["call", "hi", "--model-url", srv.base_url, "--no-stream"])
    assert result.exit_code == 1
    assert "TRUNCATED" in result.output and "quarantined" in result.output
    assert srv.requests[0].json["stream"] is False


def test_call_sends_a_json_schema(srv, tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text('{"type": "object"}')
    srv.script([Reply(text="{}"), Reply(text="{}")])
    runner.invoke(app, ["call", "hi", "--model-url", srv.base_url, "--json-schema", str(schema), "--json"])
    runner.invoke(
        app, ["call", "hi", "--model-url", srv.base_url, "--json-schema", str(schema), "--schema-style", "json_object"]
    )
    formats = [r.json["response_format"] for r in srv.requests]
    assert formats[0]["type"] == "json_schema" and formats[0]["json_schema"]["schema"] == {"type": "object"}
    assert formats[1] == {"type": "json_object", "schema": {"type": "object"}}


def test_bad_schema_file_is_a_config_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    result = runner.invoke(app, ["call", "hi", "--json-schema", str(bad)])
    assert isinstance(result.exception, ConfigError) and "not a readable JSON file" in str(result.exception)


def test_unreachable_server_subprocess_prints_transport_failure_without_traceback():
    proc = subprocess.run([ESCROW, "call", "hi", "--model-url", "http://127.0.0.1:9/v1", "--model", "m",
                           "--deadline", "2"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "TRANSPORT_FAILURE" in proc.stdout and "connect_error" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_unreachable_server_json_subprocess():
    proc = subprocess.run([ESCROW, "call", "hi", "--model-url", "http://127.0.0.1:9/v1", "--model", "m",
                           "--deadline", "2", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and json.loads(proc.stdout)["status"] == "TRANSPORT_FAILURE"


def test_fault_server_cli_serves_a_script_until_interrupted(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(Script(steps=(Reply(text="from the cli server"), Fault.http(503))).model_dump_json())
    # Ctrl-C as a terminal delivers it: SIGINT at its default disposition in
    # the server. A test run started in the background (`cmd &`) inherits
    # SIGINT ignored, and Python then never raises KeyboardInterrupt.
    proc = subprocess.Popen([ESCROW, "fault-server", "--script", str(script), "--port", "0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        announced = json.loads(proc.stdout.readline())
        assert announced["steps"] == 2
        call = subprocess.run([ESCROW, "call", "hi", "--model-url", announced["base_url"], "--json"],
                              capture_output=True, text=True, timeout=60)
        assert json.loads(call.stdout)["payload"]["text"] == "from the cli server"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0 and "Traceback" not in err


def test_fault_server_cli_rejects_a_bad_script(tmp_path):
    script = tmp_path / "bad.json"
    script.write_text('{"steps": [{"kind": "reply", "chunk_chars": 0}]}')
    proc = subprocess.run([ESCROW, "fault-server", "--script", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "invalid at steps.0.reply.chunk_chars" in " ".join(proc.stderr.split())
    assert "Traceback" not in proc.stderr


@pytest.mark.llama
def test_call_against_the_real_server(llama_url):
    proc = subprocess.run(
        [
            ESCROW,
            "call",
            "Name a colour.",
            "--model-url",
            llama_url + "/v1",
            "--model",
            "gemma-3-270m",
            "--max-tokens",
            "4",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "ESCROW_HOME": os.environ["ESCROW_HOME"]},
    )
    env = json.loads(proc.stdout)
    assert env["status"] in ("COMPLETED", "TRUNCATED") and env["model"] == "gemma-3-270m"


def test_fault_server_fixes_starts_a_tasks_fix_again_for_each_new_run(tmp_path):
    """The flow of docs/BATCH.md: a task whose run was cut off after its first
    call (Ctrl-C, then ``escrow batch --resume``) gets its whole fix again."""
    import httpx

    from orchestrator.composition.batch.scripted import fix_script

    tasks = Path(__file__).resolve().parents[2] / "examples" / "tasks"
    proc = subprocess.Popen([ESCROW, "fault-server", "--fixes", str(tasks), "--port", "0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        url = json.loads(proc.stdout.readline())["model_url"].replace("{task_id}", "calc-mean")
        opening = [{"role": "system", "content": "s"}, {"role": "user", "content": "fix mean"}]

        def call(messages: list[dict]) -> dict:
            response = httpx.post(f"{url}/chat/completions", json={"model": "m", "messages": messages}, timeout=10)
            assert response.status_code == 200, response.text
            return response.json()["choices"][0]["message"]["tool_calls"][0]["function"]

        first = call(opening)  # the run that is interrupted here
        steps = len(fix_script(tasks / "calc-mean"))
        played, history = [call(opening)], list(opening)  # the resumed run: from the start
        for _ in range(steps - 1):
            history += [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                                              "function": played[-1]}]},
                        {"role": "tool", "tool_call_id": "c", "content": "ok"}]
            played.append(call(history))
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
    assert played[0] == first and played[0]["name"] == "write_file"
    assert played[-1]["name"] == "submit"  # the whole fix, not "script exhausted"
    assert proc.returncode == 0 and "Traceback" not in err
