"""The teacher scoring wire shapes (vLLM ``prompt_logprobs``, SGLang
``/generate``) served over loopback HTTP by the fault server, the hostile
answers each refused with a typed error, llama-server refused, and the
vocabulary check before anything is scored."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from orchestrator.adapters.fault_server import FaultServer
from orchestrator.adapters.fault_server.scenario import RawResponse
from orchestrator.adapters.model_client.teacher_scoring import TeacherClient, check_vocabulary
from orchestrator.errors import TeacherAnswerInvalid, TeacherRefused

PROMPT, SAMPLED = (2, 5), (7, 9)


def vllm_answer(entries: list[Any]) -> RawResponse:
    body = {"object": "text_completion", "choices": [{"index": 0, "text": "x", "prompt_logprobs": entries}]}
    return RawResponse(body=json.dumps(body).encode())  # json.dumps writes NaN as NaN, as Python's servers do


GOOD_VLLM = [None, {"5": {"logprob": -1.0, "rank": 2}},
             {"7": {"logprob": -0.5, "rank": 1}},
             {"9": {"logprob": -2.0, "rank": 4}, "3": {"logprob": -0.2, "rank": 1}}]


def test_vllm_scores_the_sampled_ids_from_prompt_logprobs(fault_server: FaultServer):
    fault_server.push(vllm_answer(GOOD_VLLM))
    with TeacherClient(fault_server.base_url, "teacher", "vllm", top_k=3) as teacher:
        score = teacher.score(PROMPT, SAMPLED)
    assert score.logprobs == (-0.5, -2.0) and score.in_top_k == (True, False)
    (sent,) = [r.json for r in fault_server.requests if r.path == "/v1/completions"]
    assert sent["prompt"] == [2, 5, 7, 9] and sent["prompt_logprobs"] == 3 and sent["max_tokens"] == 1


@pytest.mark.parametrize(("entries", "named"), [
    (GOOD_VLLM[:3], "gave 3 prompt_logprobs for 4 tokens"),
    ([*GOOD_VLLM[:3], {"9": {"logprob": float("nan"), "rank": 4}}], "logprob nan"),
    ([*GOOD_VLLM[:3], {"9": {"logprob": 0.5, "rank": 4}}], "logprob 0.5"),
    ([*GOOD_VLLM[:3], None], "no entry for id 9"),
    ([*GOOD_VLLM[:3], {"8": {"logprob": -1.0, "rank": 1}}], "no entry for id 9"),  # shifted by one id
    ([*GOOD_VLLM[:3], {"9": {"logprob": None, "rank": 4}}], "sampled token 1 has no logprob"),
])
def test_a_hostile_vllm_answer_is_a_typed_refusal(fault_server: FaultServer, entries, named):
    fault_server.push(vllm_answer(entries))
    with TeacherClient(fault_server.base_url, "teacher", "vllm", top_k=3) as teacher, \
            pytest.raises(TeacherAnswerInvalid) as caught:
        teacher.score(PROMPT, SAMPLED)
    assert named in caught.value.message


@contextmanager
def engine(**endpoints: Any) -> Iterator[FaultServer]:
    with FaultServer(endpoints={path.replace("_", "/"): answer for path, answer in endpoints.items()}) as server:
        yield server


GOOD_SGLANG = [[None, 2, None], [-1.0, 5, None], [-0.5, 7, None], [-2.0, 9, None]]
TOPS = [None, [[-1.0, 5, None]], [[-0.5, 7, None]], [[-0.1, 3, None]]]


def test_sglang_scores_the_sampled_ids_from_input_token_logprobs():
    with engine(_generate={"text": "", "meta_info": {"input_token_logprobs": GOOD_SGLANG,
                                                    "input_top_logprobs": TOPS}}) as server, \
            TeacherClient(server.base_url, "teacher", "sglang", top_k=1) as teacher:
        score = teacher.score(PROMPT, SAMPLED)
    assert score.logprobs == (-0.5, -2.0) and score.in_top_k == (True, False)


@pytest.mark.parametrize(("entries", "named"), [
    (GOOD_SGLANG[:3], "gave 3 input_token_logprobs for 4 tokens"),
    ([*GOOD_SGLANG[:3], [None, 9, None]], "sampled token 1 has no logprob"),
    ([*GOOD_SGLANG[:3], [-1.0, 8, None]], "do not name id 9"),
    ([*GOOD_SGLANG[:3], [3.0, 9, None]], "logprob 3.0"),
])
def test_a_hostile_sglang_answer_is_a_typed_refusal(entries, named):
    with engine(_generate={"meta_info": {"input_token_logprobs": entries}}) as server, \
            TeacherClient(server.base_url, "teacher", "sglang") as teacher, \
            pytest.raises(TeacherAnswerInvalid) as caught:
        teacher.score(PROMPT, SAMPLED)
    assert named in caught.value.message


def test_llama_server_is_refused_with_the_alternatives():
    with pytest.raises(TeacherRefused) as caught:
        TeacherClient("http://127.0.0.1:1", "teacher", "llama.cpp")
    assert all(name in caught.value.message for name in ("no logprobs over a prompt", "vLLM", "SGLang",
                                                         "llama-cpp-python"))


def models(n_vocab: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": "m", "object": "model", "meta": {"n_vocab": n_vocab}}]}


def test_another_vocabulary_is_refused_with_both_figures():
    # The sizes that stopped the article's run (Qwen2.5-0.5B against 7B).
    with engine(_v1_models=models(151936)) as student, engine(_v1_models=models(152064)) as teacher_server, \
            TeacherClient(teacher_server.base_url, "m", "vllm") as teacher, pytest.raises(TeacherRefused) as caught:
        check_vocabulary(teacher, student.base_url)
    assert "151936" in caught.value.message and "152064" in caught.value.message
    assert not [r for r in teacher_server.requests if r.path == "/v1/completions"]


def test_a_probe_tokenized_otherwise_is_refused_with_both_ids():
    with engine(_tokenize={"tokens": [105, 2364]}) as student, \
            engine(_tokenize={"tokens": [105, 2365]}) as teacher_server, \
            TeacherClient(teacher_server.base_url, "m", "vllm") as teacher, pytest.raises(TeacherRefused) as caught:
        check_vocabulary(teacher, student.base_url)
    assert "student [2364], teacher [2365]" in caught.value.message


def test_the_same_tokenizer_passes():
    with engine(_tokenize={"tokens": [105, 2364]}) as student, engine(_tokenize={"tokens": [105, 2364]}) as other, \
            TeacherClient(other.base_url, "m", "vllm") as teacher:
        check_vocabulary(teacher, student.base_url)


def scored_answer(reply: Any) -> RawResponse:
    ids = [*reply.prompt_token_ids, *reply.completion_token_ids]
    return vllm_answer([None, *({str(i): {"logprob": -1.25, "rank": 1}} for i in ids[1:])])


def test_score_records_chained_rows_and_a_rerun_scores_only_what_is_missing(fault_server: FaultServer, tmp_path,
                                                                              monkeypatch):
    """A teacher that dies on one call: that call is named and the run exits
    1; the rerun asks for that call alone, nothing is scored twice, and the
    chain with the score rows verifies."""
    from typer.testing import CliRunner

    from cli.main import app
    from orchestrator.adapters.fault_server.scenario import Hangup
    from store import Store
    from tests.tokens.conftest import growing, record

    replies = growing(3)
    fault_server.script(replies)
    db = tmp_path / "escrow.db"
    run_id, _ = record(db, fault_server.base_url, 3)
    with engine(_tokenize={"tokens": [105, 2364]}) as teacher:
        args = ["score", run_id, "--teacher-url", teacher.base_url, "--teacher-model", "t", "--teacher-engine", "vllm",
                "--student-url", teacher.base_url, "--parallel", "1", "--db", f"sqlite:///{db}"]
        teacher.script([scored_answer(replies[0]), Hangup(), scored_answer(replies[2])])
        first = CliRunner().invoke(app, args)
        assert first.exit_code == 1, first.output
        assert "2 calls scored now" in first.stdout and "refused:" in first.stdout
        teacher.script([scored_answer(replies[1])])
        again = CliRunner().invoke(app, [*args, "--resume"])
        assert again.exit_code == 0, again.output
        assert len([r for r in teacher.requests if r.path == "/v1/completions"]) == 4
    assert "1 calls scored now" in again.stdout and all(len(line) <= 80 for line in again.stdout.splitlines())
    # Three sampled tokens a call, each at teacher logprob -1.25, the student -0.25 (the fault server's).
    assert [line.split() for line in again.stdout.splitlines()[2:6]] == [
        [run_id[:8], "all", "9", "1.0000", "0%"], *([str(turn), "3", "1.0000", "0%"] for turn in range(3))]
    with Store.open(f"sqlite:///{db}", readonly=True, create=False) as store:
        rows = store.teacher_scores(run_id)
        assert sorted(r["turn"] for r in rows) == [0, 1, 2] and all(r["logprobs"] == [-1.25] * 3 for r in rows)
        assert store.verify(run_id).ok
    # The rollout export carries them where the loss mask is 1 (every call here was kept).
    exported = CliRunner().invoke(app, ["export", run_id, "--format", "rollout", "--teacher-model", "t",
                                        "--db", f"sqlite:///{db}"])
    assert exported.exit_code == 0, exported.output
    (row,) = [json.loads(line) for line in exported.stdout.splitlines() if line.startswith("{")]
    assert row["teacher_logprobs"] == [-1.25 if m else 0.0 for m in row["loss_mask"]] and sum(row["loss_mask"]) == 9
    plain = CliRunner().invoke(app, ["export", run_id, "--format", "rollout", "--db", f"sqlite:///{db}"])
    assert "teacher_logprobs" not in plain.stdout
    # report RUN: the teacher's own line (its prefill: every id it read).
    reported = CliRunner().invoke(app, ["report", run_id, "--json", "--db", f"sqlite:///{db}"])
    (teacher_figures,) = json.loads(reported.stdout)["teacher"]
    assert teacher_figures["tokens"] == 9 and teacher_figures["reverse_kl"] == 1.0
    assert teacher_figures["prefill_tokens"] == sum(len(r.prompt_token_ids) + 3 for r in replies)
    assert teacher_figures["gpu_s"] > 0 and teacher_figures["outside_top_k"] == 0.0
    # Priced as a call is (its prefill as input tokens, its seconds as GPU time); absent while unpriced.
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path / "home"))
    assert teacher_figures["cost_usd"] is None
    assert CliRunner().invoke(app, ["price", "set", "t", "--input", "2", "--gpu-hour", "3600"]).exit_code == 0
    reported = CliRunner().invoke(app, ["report", run_id, "--json", "--db", f"sqlite:///{db}"])
    (priced,) = json.loads(reported.stdout)["teacher"]
    assert priced["cost_usd"] == pytest.approx(priced["prefill_tokens"] * 2 / 1e6 + priced["gpu_s"])
    shown = CliRunner().invoke(app, ["report", run_id, "--db", f"sqlite:///{db}"]).stdout
    assert f"cost ${priced['cost_usd']:,.4f}" in " ".join(shown.split())
