"""``escrow export --format otel``: GenAI spans built with the OpenTelemetry
SDK, as OTLP JSON and sent to a real Arize Phoenix server that the test
starts on loopback, then read back through Phoenix's HTTP API."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid

import httpx
import pytest

from store import Recorder
from store.read.reports import otel_export
from store.write import synthetic
from store.write.importer import import_file
from tests.conftest import require
from tests.interop.conftest import own, real

PHOENIX_BIN = os.environ.get("ESCROW_TEST_PHOENIX_BIN", "/var/cache/escrow/phoenix-venv/bin/phoenix")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    require(os.access(PHOENIX_BIN, os.X_OK), f"Arize Phoenix at {PHOENIX_BIN} (scripts/setup.sh escrow_setup_phoenix)")
    port, grpc_port, workdir = free_port(), free_port(), tmp_path_factory.mktemp("phoenix")
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PHOENIX_ALLOWED_SANDBOX_PROVIDERS": "NONE",
    }
    log = (workdir / "phoenix.log").open("wb")
    process = subprocess.Popen(
        [PHOENIX_BIN, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600  # a cold start on a loaded 2-core machine takes minutes
        while True:
            assert process.poll() is None, (workdir / "phoenix.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "Phoenix did not answer /healthz within 600 s"
            time.sleep(2)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


def spans_of(document):
    return [s for r in document["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]]


def attrs(span):
    return {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}


def test_otlp_json_is_a_span_tree_per_run(store):
    escrow_run = synthetic.record_run(Recorder(store), turns=3, seed=5)
    imported = import_file(store, own("atif/terminal_v1_6.json")).run_ids[0]
    document = otel_export.otlp_json(
        otel_export.collect([store.trajectory(escrow_run), store.trajectory(imported)], "p")
    )
    spans = spans_of(document)
    roots = [s for s in spans if "parentSpanId" not in s]
    assert sorted(attrs(r)["gen_ai.agent.id"] for r in roots) == sorted([escrow_run, imported])
    for root in roots:
        children = [s for s in spans if s.get("parentSpanId") == root["spanId"]]
        assert all(s["traceId"] == root["traceId"] for s in children)
        run_id = attrs(root)["gen_ai.agent.id"]
        assert sum(1 for s in children if s["name"].startswith("chat ")) == len(store.calls(run_id))
        assert sum(1 for s in children if s["name"].startswith("execute_tool ")) == len(store.tool_executions(run_id))
        assert all(len(s["spanId"]) == 16 and len(s["traceId"]) == 32 for s in [root, *children]), (
            "OTLP/JSON ids are hex"
        )
    decisions = [attrs(s)["escrow.acl.decision"] for s in spans if s["name"].startswith("execute_tool ")]
    assert {"allow", "deny"} <= set(decisions) and "absent" in decisions


def test_spans_reach_phoenix_with_their_tree_and_token_counts(store, phoenix, tmp_path, monkeypatch):
    escrow_run = synthetic.record_run(Recorder(store), turns=3, seed=7)
    imported = import_file(store, own("atif/terminal_v1_6.json")).run_ids[0]
    project = f"escrow-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("ESCROW_DB_URL", store.url if "://" in store.url else f"sqlite:///{store.url}")
    from typer.testing import CliRunner

    from cli.main import app

    result = CliRunner().invoke(
        app,
        ["export", "--all", "--format", "otel", "--otlp-endpoint", f"{phoenix}/v1/traces", "--otel-project", project],
    )
    assert result.exit_code == 0, result.output
    expected = {
        run_id: 1 + len(store.calls(run_id)) + len(store.tool_executions(run_id)) for run_id in (escrow_run, imported)
    }
    deadline, got = time.monotonic() + 120, []
    while time.monotonic() < deadline:
        response = httpx.get(f"{phoenix}/v1/projects/{project}/spans", params={"limit": 1000}, timeout=30)
        got = response.json().get("data", []) if response.status_code == 200 else []
        if len(got) >= sum(expected.values()):
            break
        time.sleep(2)
    assert len(got) == sum(expected.values())
    by_id = {s["context"]["span_id"]: s for s in got}
    for run_id, n in expected.items():
        [root] = [s for s in got if s["parent_id"] is None and s["attributes"].get("gen_ai.agent.id") == run_id]
        assert root["name"].startswith("invoke_agent ") and root["span_kind"] == "AGENT"
        children = [s for s in got if s["parent_id"] == root["context"]["span_id"]]
        assert len(children) == n - 1 and all(by_id[s["parent_id"]] is root for s in children)
        chats = sorted(
            (s for s in children if s["name"].startswith("chat ")), key=lambda s: s["attributes"]["escrow.call.id"]
        )
        calls = sorted(store.calls(run_id), key=lambda c: c.id)
        assert [s["attributes"]["llm.token_count.prompt"] for s in chats] == [c.response.input_tokens for c in calls]
        assert [s["attributes"]["gen_ai.usage.output_tokens"] for s in chats] == [
            c.response.output_tokens for c in calls
        ]
        assert [s["attributes"]["escrow.envelope.status"] for s in chats] == [c.response.status for c in calls]
        tools = [s for s in children if s["name"].startswith("execute_tool ")]
        assert sorted(s["attributes"]["escrow.acl.decision"] for s in tools) == sorted(
            e.decision or "absent" for e in store.tool_executions(run_id)
        )


def test_an_imported_runs_run_level_figures_are_on_its_agent_span_once(store):
    """A SWE-agent run whose calls carry no figures: its model_stats on the
    agent span, marked run-level, and on no chat span."""
    path = real("swe-agent/swe-agent__test-repo-i1.traj")
    stats = json.loads(path.read_bytes())["info"]["model_stats"]
    run_id = import_file(store, path).run_ids[0]
    spans = spans_of(otel_export.otlp_json(otel_export.collect([store.trajectory(run_id)], "p")))
    (root,) = [attrs(s) for s in spans if "parentSpanId" not in s]
    assert root["escrow.usage.basis"] == "run_level"
    assert (int(root["gen_ai.usage.input_tokens"]), int(root["gen_ai.usage.output_tokens"])) == (
        stats["tokens_sent"], stats["tokens_received"])
    assert float(root["escrow.cost_usd"]) == pytest.approx(stats["instance_cost"])
    chats = [attrs(s) for s in spans if s["name"].startswith("chat ")]
    assert chats and not any("gen_ai.usage.input_tokens" in a or "escrow.cost_usd" in a for a in chats)
    native = synthetic.record_run(Recorder(store), turns=2, seed=3)
    (plain,) = [attrs(s) for s in spans_of(otel_export.otlp_json(otel_export.collect([store.trajectory(native)], "p")))
                if "parentSpanId" not in s]
    assert "escrow.usage.basis" not in plain and "gen_ai.usage.input_tokens" not in plain
