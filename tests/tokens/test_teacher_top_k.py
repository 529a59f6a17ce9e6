"""The teacher's top K (issue 45): read by id from vLLM's ``prompt_logprobs``
and SGLang's ``input_top_logprobs`` served over loopback HTTP by the fault
server, hostile top K answers refused with a typed error, and the top K
stored in the chained score row and exported beside ``teacher_logprobs``,
aligned with the loss mask, in every rollout shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer
from orchestrator.adapters.fault_server.scenario import RawResponse
from orchestrator.adapters.model_client.teacher_scoring import TeacherClient
from orchestrator.errors import TeacherAnswerInvalid
from store import Store
from store.write.teacher_scores import CallScore
from tests.tokens.conftest import growing, record
from tests.tokens.test_teacher_wire import PROMPT, SAMPLED, engine, vllm_answer

NAN = float("nan")
# K = 2. The sampled 7 is the best; the sampled 9 is 5th, after 3 and 4.
VLLM = [None, {"5": {"logprob": -1.0, "rank": 1}, "6": {"logprob": -2.0, "rank": 2}},
        {"7": {"logprob": -0.5, "rank": 1, "decoded_token": "a"}, "8": {"logprob": -1.5, "rank": 2}},
        {"9": {"logprob": -3.0, "rank": 5}, "4": {"logprob": -2.5, "rank": 2}, "3": {"logprob": -0.2, "rank": 1}}]
SGLANG_IDS = [[None, 2, None], [-1.0, 5, None], [-0.5, 7, "a"], [-3.0, 9, "b"]]
SGLANG_TOPS = [None, [[-1.0, 5, None], [-2.0, 6, None]], [[-0.5, 7, "a"], [-1.5, 8, "c"]],
               [[-0.2, 3, None], [-2.5, 4, None]]]
TOP = (((7, -0.5), (8, -1.5)), ((3, -0.2), (4, -2.5)))


def sglang_answer(tops: Any, ids: Any = SGLANG_IDS) -> RawResponse:
    body = {"text": "", "meta_info": {"input_token_logprobs": ids, "input_top_logprobs": tops}}
    return RawResponse(body=json.dumps(body).encode())  # NaN written as NaN, as Python's servers do


def test_vllm_top_k_is_read_by_id_best_first(fault_server: FaultServer):
    fault_server.push(vllm_answer(VLLM))
    with TeacherClient(fault_server.base_url, "teacher", "vllm", top_k=2) as teacher:
        score = teacher.score(PROMPT, SAMPLED)
    assert score.top == TOP and score.logprobs == (-0.5, -3.0) and score.in_top_k == (True, False)


def test_sglang_top_k_is_read_by_id_best_first(fault_server: FaultServer):
    fault_server.push(sglang_answer(SGLANG_TOPS))
    with TeacherClient(fault_server.base_url, "teacher", "sglang", top_k=2) as teacher:
        score = teacher.score(PROMPT, SAMPLED)
    assert score.top == TOP and score.logprobs == (-0.5, -3.0) and score.in_top_k == (True, False)


def refusal(server: FaultServer, engine_name: str, answer: RawResponse) -> str:
    """What the teacher client says of ``answer`` to a K = 2 scoring, which must be a typed refusal."""
    server.push(answer)
    with TeacherClient(server.base_url, "teacher", engine_name, top_k=2) as teacher, \
            pytest.raises(TeacherAnswerInvalid) as caught:
        teacher.score(PROMPT, SAMPLED)
    return caught.value.message


def with_last(entry: dict[str, Any]) -> list[Any]:
    return [*VLLM[:3], {"9": {"logprob": -3.0, "rank": 5}, **entry}]


@pytest.mark.parametrize(("entries", "named"), [
    (with_last({"x3": {"logprob": -0.2, "rank": 1}}), "names 'x3', not a token id"),
    (with_last({"3": {"logprob": NAN, "rank": 1}}), "gives id 3 logprob nan"),
    (with_last({"3": {"logprob": 0.5, "rank": 1}}), "gives id 3 logprob 0.5"),
    (with_last({"3": {"logprob": "-0.2", "rank": 1}}), "gives id 3 logprob '-0.2'"),
    (with_last({"3": {"logprob": -0.2, "rank": "1"}}), "without an integer rank"),
    (with_last({"3": -0.2}), "without an integer rank"),
    (with_last({"3": {"logprob": -0.2, "rank": 1}, "4": {"logprob": -0.3, "rank": 2},
                "1": {"logprob": -0.4, "rank": 2}}), "3 entries ranked within K = 2"),
])
def test_a_hostile_vllm_top_k_is_a_typed_refusal(fault_server: FaultServer, entries, named):
    message = refusal(fault_server, "vllm", vllm_answer(entries))
    assert named in message and "sampled token 1" in message


@pytest.mark.parametrize(("tops", "named"), [
    ([*SGLANG_TOPS[:3], [[-0.2, 3, None], [-2.5, 4, None], [-2.6, 1, None]]], "has 3 entries for K = 2"),
    ([*SGLANG_TOPS[:3], [[NAN, 3, None]]], "gives id 3 logprob nan"),
    ([*SGLANG_TOPS[:3], [[0.5, 3, None]]], "gives id 3 logprob 0.5"),
    ([*SGLANG_TOPS[:3], [[-0.2, "3", None]]], "names '3', not a token id"),
    ([*SGLANG_TOPS[:3], [[-0.2, 3.0, None]]], "names 3.0, not a token id"),
    ([*SGLANG_TOPS[:3], [[-0.2, True, None]]], "names True, not a token id"),
    ([*SGLANG_TOPS[:3], [{"logprob": -0.2, "id": 3}]], "not [logprob, id, text]"),
    ([*SGLANG_TOPS[:3], [[-0.2]]], "not [logprob, id, text]"),
    ([*SGLANG_TOPS[:3], "x"], "is not a list"),
    (SGLANG_TOPS[:3], "gave 3 input_top_logprobs for 4 tokens"),
    ({"3": []}, "has no input_top_logprobs"),
])
def test_a_hostile_sglang_top_k_is_a_typed_refusal(fault_server: FaultServer, tops, named):
    assert named in refusal(fault_server, "sglang", sglang_answer(tops))


OTHER = 100_000  # the teacher's second best at each position: the id there + OTHER


def top_answer(reply: Any, engine_name: str) -> RawResponse:
    """The teacher's answer over a recorded call's ids: each id its best
    (-0.5), the id + OTHER its second (-2.0)."""
    ids = [*reply.prompt_token_ids, *reply.completion_token_ids]
    if engine_name == "vllm":
        return vllm_answer([None, *({str(i): {"logprob": -0.5, "rank": 1}, str(i + OTHER): {"logprob": -2.0, "rank": 2}}
                                    for i in ids[1:])])
    return sglang_answer([None, *([[-0.5, i, None], [-2.0, i + OTHER, None]] for i in ids[1:])],
                         [[None, ids[0], None], *([-0.5, i, None] for i in ids[1:])])


def export(db: Path, run_id: str, shape: str, teacher: str = "t") -> dict[str, Any]:
    got = CliRunner().invoke(app, ["export", run_id, "--format", "rollout", "--shape", shape, "--teacher-model",
                                   teacher, "--db", f"sqlite:///{db}"])
    assert got.exit_code == 0, got.output
    (row,) = [json.loads(line) for line in got.stdout.splitlines() if line.startswith("{")]
    return row


@pytest.mark.parametrize("engine_name", ["vllm", "sglang"])
def test_score_stores_the_top_k_and_export_aligns_it_with_the_loss_mask(fault_server: FaultServer, tmp_path,
                                                                        engine_name):
    replies = growing(3)
    fault_server.script(replies)
    db = tmp_path / "escrow.db"
    run_id, _ = record(db, fault_server.base_url, 3)
    with engine(_tokenize={"tokens": [105, 2364]}) as teacher:
        teacher.script([top_answer(reply, engine_name) for reply in replies])
        scored = CliRunner().invoke(app, [
            "score", run_id, "--teacher-url", teacher.base_url, "--teacher-model", "t", "--teacher-engine",
            engine_name, "--student-url", teacher.base_url, "--parallel", "1", "--top-k", "2",
            "--db", f"sqlite:///{db}"])
        assert scored.exit_code == 0, scored.output
    with Store.open(f"sqlite:///{db}") as store:
        rows = store.teacher_scores(run_id)
        assert [len(r["top"]) for r in rows] == [3, 3, 3] and store.verify(run_id).ok
        for row, reply in zip(rows, replies, strict=True):
            assert row["top"] == [[[i, -0.5], [i + OTHER, -2.0]] for i in reply.completion_token_ids]
        # A teacher that named no top K by id (llama-cpp-python): its scores, no top K.
        store.record_teacher_scores([CallScore(
            run_id=run_id, call_id=r["call_id"], turn=r["turn"], teacher_model="by-text",
            teacher_engine="llama-cpp-python", top_k=2, request_sha256="0" * 64, logprobs=(-1.0,) * 3,
            in_top_k=(True,) * 3) for r in rows])
        # One whose top K holds fewer than K somewhere: no rectangle, no columns.
        store.record_teacher_scores([CallScore(
            run_id=run_id, call_id=r["call_id"], turn=r["turn"], teacher_model="short", teacher_engine="vllm",
            top_k=2, request_sha256="1" * 64, logprobs=(-1.0,) * 3, in_top_k=(True,) * 3,
            top=(((1, -0.1), (2, -0.2)),) * 2 + (((1, -0.1),),)) for r in rows])
    flat = export(db, run_id, "flat")
    mask, ids = flat["loss_mask"], flat["input_ids"]
    assert sum(mask) == 9 and len(flat["teacher_top_ids"]) == len(ids) == len(flat["teacher_top_logprobs"])
    # Each kept position: the id there first, its logprob teacher_logprobs';
    # every other position the filler teacher_logprobs has there (0.0), K wide.
    assert flat["teacher_top_ids"] == [[i, i + OTHER] if m else [0, 0] for i, m in zip(ids, mask, strict=True)]
    assert flat["teacher_top_logprobs"] == [[-0.5, -2.0] if m else [0.0, 0.0] for m in mask]
    assert [best[0] for best in flat["teacher_top_logprobs"]] == flat["teacher_logprobs"]
    cut = len(ids) - len(export(db, run_id, "trl")["completion_ids"])
    for shape, mask_column in (("trl", "tool_mask"), ("verl", "response_mask")):
        row = export(db, run_id, shape)
        assert row[mask_column] == mask[cut:]
        assert row["teacher_top_ids"] == flat["teacher_top_ids"][cut:]
        assert row["teacher_top_logprobs"] == flat["teacher_top_logprobs"][cut:]
        assert len(row["teacher_top_ids"]) == len(row["teacher_logprobs"])
    for teacher_model in ("by-text", "short"):
        without = export(db, run_id, "verl", teacher_model)
        assert "teacher_logprobs" in without and "teacher_top_ids" not in without
        assert "teacher_top_logprobs" not in without
