"""--token-exact on vLLM's token-in endpoint, served by the fault server in
vLLM's own shapes: ``/v1/completions`` with a prompt of ids
(``return_token_ids``: each choice's ``token_ids`` and ``prompt_token_ids``;
``logprobs``) and ``/tokenize`` rendering a conversation with a ChatML
template and a tokenizer of one id a character.

One run through the CLI whose prompts grow by exactly the last prompt, the
sampled ids and the template's delta, and read CLEAN; answers that do not
pair up read as FAULTED with the answer kept; a template that drops past
answers refused before the first call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer, RawResponse, Reply
from orchestrator.adapters.fault_server.chat_tokens import ids, render
from orchestrator.adapters.model_client.token_exact import TokenExactClient
from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.errors import TemplateNotPrefixPreserving
from tests.tokens.conftest import token_exact_run, tokens_cli
from tests.tokens.test_token_exact import run_args

VLLM = {"/version": {"version": "0.11.0"}, "/detokenize": {"prompt": ""}}


@pytest.fixture
def vllm() -> Iterator[FaultServer]:
    with FaultServer(endpoints=VLLM) as server:
        yield server


def completion(*, token_ids: list[int] | None, logprobs: int, prompt_token_ids: list[int] | None = None) -> bytes:
    choice = {"index": 0, "text": "hi", "finish_reason": "stop", "token_ids": token_ids,
              "prompt_token_ids": prompt_token_ids,
              "logprobs": {"tokens": ["h"] * logprobs, "token_logprobs": [-0.5] * logprobs,
                           "top_logprobs": [{"h": -0.5}] * logprobs, "text_offset": [0] * logprobs}}
    return json.dumps({"id": "cmpl-1", "object": "text_completion", "model": "m", "choices": [choice],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}).encode()


@pytest.mark.parametrize(("answer", "named"), [
    (completion(token_ids=[104, 105], logprobs=1), "answered 1 logprobs for 2 sampled ids"),
    (completion(token_ids=[104, 105], logprobs=3), "answered 3 logprobs for 2 sampled ids"),
    (completion(token_ids=[104, 105], logprobs=2, prompt_token_ids=[1, 2]), "read other prompt ids than were sent"),
    (completion(token_ids=None, logprobs=2), "without its text and sampled ids"),  # vLLM before 0.10.2
], ids=["fewer-logprobs", "more-logprobs", "other-prompt", "no-ids"])
def test_a_vllm_answer_that_does_not_pair_up_is_faulted_and_kept(vllm: FaultServer, answer: bytes, named: str):
    vllm.script([RawResponse(body=answer)])
    request = ModelRequest(model="m", messages=(Message(role="user", content="Say hi."),), max_tokens=4,
                           sampling=Sampling(temperature=0.0))
    with TokenExactClient(vllm.base_url, model="m") as client:
        envelope = client.call(request)
    assert envelope.status.value == "FAULTED" and envelope.error is not None
    assert named in envelope.error.message, envelope.error.message
    assert envelope.raw_response == answer.decode() and envelope.engine == "vllm 0.11.0"
    (sent,) = [json.loads(r.body) for r in vllm.requests]
    assert sent["prompt"] == ids(render([{"role": "user", "content": "Say hi."}], "chatml"))
    assert sent["return_token_ids"] is True and sent["logprobs"] == 1


def test_a_template_that_drops_past_answers_is_refused_before_the_first_call(tmp_path, monkeypatch):
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path / "home"))
    example = Path(__file__).resolve().parents[2] / "examples" / "calculator"
    with FaultServer(endpoints=VLLM, chat_template="drops_past_answers") as server:
        result = CliRunner().invoke(app, run_args(example, server.base_url.removesuffix("/v1")))
        assert isinstance(result.exception, TemplateNotPrefixPreserving), result.output
        assert "does not render an earlier answer's text" in result.exception.message
        assert server.requests == []  # no completion asked for
    assert not (tmp_path / "home" / "escrow.db").exists()


READ = '<tool name="read_file">{"path": "calc.py"}</tool>'
SUBMIT = '<tool name="submit">{"summary": "done"}</tool>'


@pytest.mark.docker
def test_a_token_exact_run_on_vllm_grows_by_the_sampled_ids_and_the_delta_and_is_clean(
        vllm: FaultServer, tmp_path, sandbox_image, sandbox_runtime):
    # The first answer's sampled ids are not what its text re-encodes to (an
    # id the tokenizer never writes for "<", as two sampled ids can decode to
    # a word that encodes as one): only ids carried as sampled match them.
    sampled = [300_000, *ids(READ)[1:]]
    db, run_id, (first, second), asked = token_exact_run(
        vllm, tmp_path, [Reply(text=READ, completion_token_ids=sampled),
                         Reply(text=SUBMIT, completion_token_ids=ids(SUBMIT))], sandbox_runtime)
    assert all(b["return_token_ids"] is True and b["logprobs"] == 1 for b in (first, second))
    # Turn 1's prompt: turn 0's prompt, its sampled ids, then what the
    # template writes after an answer (its end of turn, the tool's result,
    # the generation prompt) - nothing re-rendered.
    carried = first["prompt"] + sampled
    after = [m.to_wire() for m in asked[1][len(asked[0]) + 1:]]
    assert second["prompt"] == carried + ids("<|im_end|>\n" + render(after, "chatml"))
    assert first["prompt"] == ids(render([m.to_wire() for m in asked[0]], "chatml"))

    checked, data = tokens_cli(db, run_id, "--json")
    assert checked.exit_code == 0, checked.output
    assert [c["token_class"] for c in data["calls"]] == ["CLEAN", "CLEAN"]
    assert all(c["problems"] == [] for c in data["calls"])
    # Replayed at the token level with the engine's /tokenize: the same ids.
    checked, data = tokens_cli(db, run_id, "--json", "--rebuild", "--model-url",
                               vllm.base_url.removesuffix("/v1"))
    assert checked.exit_code == 0, checked.output
    assert [(r["position"], r["recorded"]) for r in data["rebuilt"]] == [
        (None, len(first["prompt"])), (None, len(second["prompt"]))]
