"""``escrow export --format rollout``: rows a trainer reads without
retokenizing, loaded with pyarrow and datasets."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import Reply
from orchestrator.exit_codes import ExitCode
from orchestrator.interop.atif_schema import Metrics
from orchestrator.rollout import reward_of
from store.read.reports import ExportError
from tests.tokens.conftest import EOT, NL, growing, record


def export(db, *argv):
    return CliRunner().invoke(app, ["export", *argv, "--format", "rollout", "--db", f"sqlite:///{db}"])


def masked(row) -> list[int]:
    return [i for i, m in zip(row["input_ids"], row["loss_mask"], strict=True) if m]


def test_a_clean_run_is_one_sequence_whose_masked_ids_are_exactly_the_sampled_ids(srv, tmp_path):
    replies = growing(3)
    srv.script(replies)
    db = tmp_path / "e.db"
    run_id, envelopes = record(db, srv.base_url, 3)
    result = export(db, run_id)
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in result.stdout.splitlines()]
    sampled = [i for e in envelopes for i in e.completion_token_ids]
    assert masked(row) == sampled
    assert row["input_ids"] == list(envelopes[-1].prompt_token_ids + envelopes[-1].completion_token_ids)
    assert [lp for lp, m in zip(row["logprobs"], row["loss_mask"], strict=True) if m] == [-0.25] * len(sampled)
    assert (row["reward"], row["verdict"], row["run_id"], row["sequences"]) == (1.0, "PASS", run_id, 1)
    assert row["turns"] == [0, 1, 2] and row["sampling"]["temperature"] == 0.0


def test_a_fork_splits_the_run_into_sequences(srv, tmp_path):
    replies = growing(3)
    replies[2] = replies[2].model_copy(update={"prompt_token_ids": [2, 5, 77, NL]})
    srv.script(replies)
    db = tmp_path / "e.db"
    run_id, envelopes = record(db, srv.base_url, 3)
    rows = [json.loads(line) for line in export(db, run_id).stdout.splitlines()]
    assert [r["sequence"] for r in rows] == [0, 1] and [r["turns"] for r in rows] == [[0, 1], [2]]
    assert masked(rows[1]) == list(envelopes[2].completion_token_ids)
    assert rows[1]["input_ids"][:4] == [2, 5, 77, NL] and sum(rows[1]["loss_mask"][:4]) == 0


def test_a_realign_masks_out_the_replaced_end_of_turn(srv, tmp_path):
    first = Reply(text="ab", chunk_chars=1, prompt_token_ids=[2, 5], completion_token_ids=[30, 1])  # 1: <eos>
    second = Reply(text="cd", chunk_chars=1, prompt_token_ids=[2, 5, 30, EOT, NL, 9], completion_token_ids=[40, EOT])
    srv.script([first, second])
    db = tmp_path / "e.db"
    run_id, _ = record(db, srv.base_url, 2)
    (row,) = [json.loads(line) for line in export(db, run_id).stdout.splitlines()]
    assert row["input_ids"] == [2, 5, 30, EOT, NL, 9, 40, EOT]
    assert row["loss_mask"] == [0, 0, 1, 0, 0, 0, 1, 1]


def test_a_run_with_absent_ids_is_refused_with_the_reason(srv, tmp_path):
    srv.script([Reply(text="no ids here")])
    db = tmp_path / "e.db"
    run_id, _ = record(db, srv.base_url, 1)
    result = export(db, run_id)
    assert isinstance(result.exception, ExportError) and result.exception.exit_code == ExitCode.NOTHING_TO_REPORT
    assert "has no prompt ids: the engine gave none, and text is never retokenized" in result.exception.message


def test_ids_that_contradict_usage_are_refused(srv, tmp_path):
    reply = growing(1)[0].model_copy(update={"usage": {"prompt_tokens": 9, "completion_tokens": 3,
                                                       "total_tokens": 12}})
    srv.script([reply])
    db = tmp_path / "e.db"
    run_id, _ = record(db, srv.base_url, 1)
    result = export(db, run_id)
    assert isinstance(result.exception, ExportError) and "usage.prompt_tokens 9" in result.exception.message


@pytest.mark.parametrize("shape", ["trl", "verl", "atif"])
def test_shapes_for_trl_verl_and_atif(srv, tmp_path, shape):
    srv.script(growing(2))
    db = tmp_path / "e.db"
    run_id, envelopes = record(db, srv.base_url, 2)
    (row,) = [json.loads(line) for line in export(db, run_id, "--shape", shape).stdout.splitlines()]
    first_prompt = list(envelopes[0].prompt_token_ids)
    rest = list(envelopes[1].prompt_token_ids + envelopes[1].completion_token_ids)[len(first_prompt):]
    if shape == "trl":
        assert row["prompt_ids"] == first_prompt and row["completion_ids"] == rest
        assert len(row["tool_mask"]) == len(rest) and row["tool_mask"][:3] == [1, 1, 1]
        assert row["tool_mask"][3:6] == [0, 0, 0]  # the template's and the next user's ids
    elif shape == "verl":
        assert row["prompt_ids"] == first_prompt and row["response_ids"] == rest
        assert len(row["response_mask"]) == len(row["response_logprobs"]) == len(rest)
    else:
        steps = [Metrics.model_validate(step["metrics"]) for step in row["steps"]]
        assert [s.completion_token_ids for s in steps] == [list(e.completion_token_ids) for e in envelopes]
        assert steps[1].prompt_token_ids == list(envelopes[1].prompt_token_ids)


def test_parquet_and_jsonl_load_with_pyarrow_and_datasets(srv, tmp_path):
    import datasets

    srv.script(growing(2) + growing(2, start=6))
    db = tmp_path / "e.db"
    record(db, srv.base_url, 2)
    record(db, srv.base_url, 2, verdict="BUDGET_EXHAUSTED")
    parquet, jsonl = tmp_path / "r.parquet", tmp_path / "r.jsonl"
    assert export(db, "--all", "-o", str(parquet)).exit_code == 0
    assert export(db, "--all", "-o", str(jsonl)).exit_code == 0
    table = pq.read_table(parquet)
    assert {"input_ids", "loss_mask", "logprobs", "reward", "run_id"} <= set(table.column_names)
    assert sorted(table.column("reward").to_pylist()) == [0.0, 1.0]
    for loaded in (datasets.load_dataset("parquet", data_files=str(parquet), split="train"),
                   datasets.load_dataset("json", data_files=str(jsonl), split="train")):
        assert loaded.num_rows == 2
        for item in loaded:
            assert len(item["input_ids"]) == len(item["loss_mask"]) == len(item["logprobs"])
            assert sum(item["loss_mask"]) == 6


def test_the_reward_is_the_verifiers_verdict_only():
    assert reward_of("PASS") == 1.0
    assert [reward_of(v) for v in ("BUDGET_EXHAUSTED", "REFUSED", "FAULTED", "TRANSPORT_FAILURE")] == [0.0] * 4
    # No verdict on the answer, or a pass held back: no reward, never a 0 that reads as a failure.
    assert [reward_of(v) for v in ("INFRA_ERROR", "CANCELED", "SUSPECT", None)] == [None] * 4


def test_a_batch_exports_its_runs_and_names_the_refused_one(srv, tmp_path):
    from store.store import Store
    from store.write.batches import MODEL, create_batch, finish_attempt, start_attempt

    srv.script([*growing(2), Reply(text="no ids")])
    db = tmp_path / "e.db"
    exact, _ = record(db, srv.base_url, 2)
    blind, _ = record(db, srv.base_url, 1)
    with Store.open(f"sqlite:///{db}") as store:
        batch = create_batch(store, task_file="tasks.jsonl", tasks={"a": (1, {}), "b": (2, {})}, settings={})
        for task, run_id in (("a", exact), ("b", blind)):
            attempt = start_attempt(store, batch, task)
            finish_attempt(store, attempt, outcome=MODEL, run_id=run_id, verdict="PASS")
    result = export(db, "--batch", batch[:8])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["run_id"] for line in result.stdout.splitlines()] == [exact]
    assert f"refused 1: run {blind}: call 1" in " ".join(result.stderr.split())


@pytest.mark.parametrize("argv", [("--all", "--batch", "x"), ("--shape", "nope", "--all"), ()])
def test_rollout_misuse_is_a_clear_error(tmp_path, argv):
    from orchestrator.errors import ConfigError
    from store.store import Store

    db = tmp_path / "e.db"
    Store.open(f"sqlite:///{db}").close()
    result = export(db, *argv)
    assert isinstance(result.exception, ConfigError)


def test_shape_and_batch_belong_to_rollout(tmp_path):
    from orchestrator.errors import ConfigError
    from store.store import Store

    db = tmp_path / "e.db"
    Store.open(f"sqlite:///{db}").close()
    result = CliRunner().invoke(app, ["export", "--all", "--shape", "trl", "--db", f"sqlite:///{db}"])
    assert isinstance(result.exception, ConfigError) and "rollout only" in result.exception.message
