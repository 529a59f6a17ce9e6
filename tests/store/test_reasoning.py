"""Reasoning through the store: its schema-4 columns, the chain, ``escrow
show`` and ``escrow export --reasoning``."""

from __future__ import annotations

import json
import random
import sqlite3
from contextlib import closing

from typer.testing import CliRunner

from cli.main import app
from orchestrator.contract import Message, ToolCall
from orchestrator.envelope import Envelope, Payload, Status, Usage
from store import Recorder, Store
from store.write import synthetic

REASONING = "The test fails because the fixture path is wrong; read conftest first."


def record_reasoning_run(db_path) -> str:
    rng = random.Random(3)
    call = ToolCall(id="call_r", name="read_file", arguments='{"path": "conftest.py"}')
    envelope = Envelope(
        status=Status.COMPLETED, finish_reason="tool_calls", http_status=200,
        payload=Payload(text="Reading it.", tool_calls=(call,), reasoning=REASONING),
        usage=Usage(prompt_tokens=50, completion_tokens=40, prompt_source="server", completion_source="server",
                    reasoning_tokens=30, reasoning_convention="excluded"),
    )
    with Store.open(f"sqlite:///{db_path}") as store:
        recorder = Recorder(store)
        run_id = synthetic.start(recorder, rng)
        with recorder.turn(run_id, 0) as tx:
            call_id = tx.request(synthetic.request_for(0, [Message(role="user", content="fix it")]))
            tx.envelope(call_id, envelope)
            tx.commit(
                [
                    Message(role="user", content="fix it"),
                    Message(role="assistant", content="Reading it.", tool_calls=(call,)),
                ]
            )
        with recorder.turn(run_id, 1) as tx:
            history = [
                Message(role="user", content="fix it"),
                Message(role="assistant", content="Reading it.", tool_calls=(call,)),
                Message(role="tool", content="...", tool_call_id="call_r"),
            ]
            call_id = tx.request(synthetic.request_for(1, history))
            tx.envelope(call_id, Envelope(status=Status.COMPLETED, finish_reason="stop", payload=Payload(text="done")))
            tx.commit([Message(role="assistant", content="done")])
        recorder.finish_run(run_id, "PASS", "ok", turn=2)
    return run_id


def test_reasoning_is_stored_in_its_columns_and_chained(db_path):
    run_id = record_reasoning_run(db_path)
    with closing(sqlite3.connect(db_path)) as conn:
        rows = conn.execute(
            "SELECT reasoning, reasoning_tokens, reasoning_convention FROM model_responses ORDER BY seq"
        ).fetchall()
    assert rows == [(REASONING, 30, "excluded"), (None, None, None)]
    with Store.open(f"sqlite:///{db_path}", readonly=True) as store:
        assert store.verify(run_id).ok


def test_a_tampered_reasoning_breaks_the_chain(db_path):
    run_id = record_reasoning_run(db_path)
    with closing(sqlite3.connect(db_path)) as conn:
        conn.execute("UPDATE model_responses SET reasoning = 'nothing to see' WHERE reasoning IS NOT NULL")
        conn.commit()
    with Store.open(f"sqlite:///{db_path}", readonly=True) as store:
        assert not store.verify(run_id).ok


def test_show_and_export_reasoning(db_path, monkeypatch):
    run_id = record_reasoning_run(db_path)
    monkeypatch.setenv("ESCROW_DB_URL", f"sqlite:///{db_path}")
    shown = CliRunner().invoke(app, ["show", run_id])
    assert shown.exit_code == 0, shown.output
    assert REASONING in shown.output, "show prints the reasoning with the turn's words"
    full = CliRunner().invoke(app, ["show", run_id, "--full"])
    assert full.exit_code == 0, full.output
    assert f"reasoning ({len(REASONING)} B, 30 tokens, excluded)" in full.output  # its figures, under the call
    assert f"  ~ {REASONING}" in full.output  # its text whole, with the turn's words

    plain = CliRunner().invoke(app, ["export", run_id])
    assert plain.exit_code == 0, plain.output
    assert "reasoning_content" not in plain.stdout
    result = CliRunner().invoke(app, ["export", run_id, "--reasoning"])
    assert result.exit_code == 0, result.output
    example = json.loads(result.stdout.splitlines()[0])
    assistants = [m for m in example["messages"] if m["role"] == "assistant"]
    assert assistants[0]["reasoning_content"] == REASONING
    assert "reasoning_content" not in assistants[1]


def test_report_by_engine_groups_calls_by_the_engine_that_answered(db_path, monkeypatch):
    record_reasoning_run(db_path)  # its envelopes name no engine
    with Store.open(f"sqlite:///{db_path}") as store:
        synthetic.record_run(Recorder(store), turns=2, seed=4)  # answered by "llama.cpp"
    monkeypatch.setenv("ESCROW_DB_URL", f"sqlite:///{db_path}")
    result = CliRunner().invoke(app, ["report", "--by", "engine", "--json"])
    assert result.exit_code == 0, result.output
    groups = {g["engine"]: (g["runs"], g["calls"]) for g in json.loads(result.stdout)["groups"]}
    assert groups == {"llama.cpp": (1, 2), "(unknown)": (1, 2)}


def test_report_shows_the_engine_recorded_on_the_run(db_path, monkeypatch):
    with Store.open(f"sqlite:///{db_path}") as store:
        recorder = Recorder(store)
        run_id = synthetic.start(recorder, random.Random(5))
        recorder.record_event(run_id, None, "engine", {"engine": "llama.cpp", "version": "b6510",
                                                       "settings": {"context_length": 4096}, "evidence": ["/props"]})
        history: list[Message] = []
        synthetic.record_turn(recorder, run_id, 0, history, random.Random(5))
    monkeypatch.setenv("ESCROW_DB_URL", f"sqlite:///{db_path}")
    result = CliRunner().invoke(app, ["report", run_id, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["engines"] == ["llama.cpp b6510 (context_length 4096)"]
    text = CliRunner().invoke(app, ["report", run_id])
    assert "engine llama.cpp b6510 (context_length 4096)" in text.stdout
