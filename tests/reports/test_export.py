"""Exports: TRL conversational examples rebuilt from recorded runs (loaded with
the `datasets` library), and every recorded row as events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from store import Recorder
from store.read.reports import ExportError, conversation, event_lines

ROLES = {"system", "user", "assistant", "tool"}


def check_trl_conversational(example: dict[str, Any]) -> None:
    """TRL's conversational language-modelling form with tool calls."""
    messages = example["messages"]
    assert isinstance(messages, list) and messages
    pending: set[str] = set()
    for m in messages:
        assert m["role"] in ROLES and isinstance(m["content"], str)
        for call in m.get("tool_calls") or []:
            assert m["role"] == "assistant" and call["type"] == "function"
            assert isinstance(call["function"]["name"], str) and isinstance(call["function"]["arguments"], dict)
            pending.add(call["id"])
        if m["role"] == "tool":
            assert m["tool_call_id"] in pending and m["name"]
    for tool in example["tools"]:
        assert tool["type"] == "function" and set(tool["function"]) == {"name", "description", "parameters"}


def test_messages_are_the_final_request_plus_the_last_turn(scripted) -> None:
    run_id = scripted.record(scripted.GROWING)
    example = conversation(scripted.store.trajectory(run_id))
    check_trl_conversational(example)
    roles = [m["role"] for m in example["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant"]
    assert example["messages"][-1]["content"] == "step 3"  # appended by the last turn, after the final request
    assert example["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"cmd": "pytest -x"}
    assert example["messages"][5] == {
        "role": "tool",
        "content": "def f(): ...",
        "tool_call_id": "c1_0",
        "name": "read_file",
    }
    assert [t["function"]["name"] for t in example["tools"]] == ["bash", "read_file"]
    assert (
        example["verdict"] == "PASS"
        and example["tokenizer"] == "model:gemma-3-270m"
        and example["tokenizer_source"] == "model"
    )
    assert (example["truncated_completions"], example["capped_tool_outputs"], example["compacted"]) == (0, 0, False)


def test_flags_tokenizer_and_unparsed_arguments(scripted) -> None:
    scripted.recorder = Recorder(scripted.store, output_cap_bytes=8)
    turns = [
        scripted.Turn(100, 0, 5, tools=[("bash", '{"cmd": "ls"', "error (parse): bad JSON")], stdout="x" * 100,
                      events=[("token_counts", {"tokenizer": "tiktoken:cl100k_base", "counts": {}})]),
        scripted.Turn(120, 100, 5, status=scripted.envelope(1, 0, 1).status.TRUNCATED,
                      events=[("compaction", {"strategy": "elide_tool_outputs"})]),
    ]
    example = conversation(scripted.store.trajectory(scripted.record(turns)))
    check_trl_conversational(example)
    assert example["tokenizer"] == "tiktoken:cl100k_base" and example["tokenizer_source"] == "event"
    assert example["unparsed_tool_arguments"] == 1
    assert example["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"raw": '{"cmd": "ls"'}
    assert (example["truncated_completions"], example["capped_tool_outputs"], example["compacted"]) == (1, 1, True)


def test_a_run_without_calls_cannot_be_exported(scripted) -> None:
    run_id = scripted.recorder.start_run(task="t", repo="/r", model="m", config={}, policy={})
    with pytest.raises(ExportError, match="no model call"):
        conversation(scripted.store.trajectory(run_id))


def test_exported_jsonl_loads_as_a_dataset(scripted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets  # pinned in the test extras

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / "train.jsonl"
    runs = [scripted.record(scripted.GROWING), scripted.record(scripted.GROWING[:2])]
    path.write_text("".join(json.dumps(conversation(scripted.store.trajectory(r))) + "\n" for r in runs))
    ds = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    assert ds.num_rows == 2 and {"messages", "tools", "tokenizer"} <= set(ds.column_names)
    first = ds[0]
    assert first["messages"][2]["tool_calls"][0]["function"]["arguments"]["cmd"] == "pytest -x"
    assert first["messages"][4]["tool_calls"][0]["function"]["arguments"]["path"] == "src/app.py"
    assert first["tools"][0]["function"]["name"] == "bash"
    assert [m["role"] for m in ds[1]["messages"]] == ["system", "user", "assistant", "tool", "assistant", "tool"]


def test_events_export_every_row_in_chain_order(scripted) -> None:
    run_id = scripted.record(scripted.GROWING)
    trajectory = scripted.store.trajectory(run_id)
    lines = list(event_lines(trajectory))
    assert lines[0]["type"] == "run" and lines[0]["id"] == run_id
    seqs = [line["seq"] for line in lines[1:]]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    attempts = sum(len(c.attempts) for record in trajectory.turns for c in record.calls)
    # Attempts travel inside their response; every other chained row is a line.
    assert len(lines) - 1 == trajectory.run.chain_seq - attempts
    assert {line["type"] for line in lines} == {
        "run",
        "turn",
        "model_call",
        "model_response",
        "candidate",
        "transition",
        "tool_execution",
        "event",
    }
    assert all(line["run_id"] == run_id for line in lines)
    json.dumps(lines)  # JSON-ready
