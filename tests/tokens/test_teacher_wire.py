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

from orchestrator.errors import TeacherAnswerInvalid, TeacherRefused
from orchestrator.fault_server import FaultServer
from orchestrator.fault_server.scenario import RawResponse
from orchestrator.model_client.teacher_scoring import TeacherClient, check_vocabulary

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
