"""--token-exact on SGLang's native ``/generate``, served by the fault server
in SGLang's own shapes: ``input_ids`` in, ``output_ids`` and ``meta_info``
(``prompt_tokens``, ``completion_tokens``, ``output_token_logprobs`` as
``[logprob, id, text]`` triples, ``finish_reason`` as ``{"type"}``) out;
``/tokenize`` of text; the chat template read from the tokenizer files
``/get_model_info`` names (SGLang renders none over HTTP).

One run through the CLI whose second prompt is the first prompt, the
sampled ids and the template's delta, CLEAN; answers that do not pair up
FAULTED with the answer kept; ids that contradict usage or the vocabulary
flagged by the drift check; tokenizer files not readable here refused
before the first call."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import Fault, FaultServer, RawResponse, Reply
from orchestrator.adapters.fault_server.chat_tokens import ids, render
from orchestrator.adapters.model_client.token_exact import TokenExactClient
from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.errors import TokenizerError
from orchestrator.token_drift import check_envelopes
from tests.tokens.conftest import token_exact_run, tokens_cli
from tests.tokens.test_token_exact import run_args

# ChatML, as a Hugging Face tokenizer_config.json holds it.
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def sglang_endpoints(tokenizer_dir: Path) -> dict[str, object]:
    return {"/get_server_info": {"version": "0.5.4", "context_length": 32768, "disable_radix_cache": False},
            "/get_model_info": {"model_path": "/nowhere", "tokenizer_path": str(tokenizer_dir),
                                "is_generation": True},
            "/detokenize": {"text": ""}}


@pytest.fixture
def tokenizer_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "tokenizer"
    directory.mkdir()
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "eos_token": "<|im_end|>"}))
    return directory


@pytest.fixture
def sglang(tokenizer_dir: Path) -> Iterator[FaultServer]:
    with FaultServer(endpoints=sglang_endpoints(tokenizer_dir)) as server:
        yield server


ASK = ModelRequest(model="m", messages=(Message(role="user", content="Say hi."),), max_tokens=4,
                   sampling=Sampling(temperature=0.0, logprobs=True, top_logprobs=1))
PROMPT = ids(render([{"role": "user", "content": "Say hi."}], "chatml"))


def generated(output_ids: object, triples: object, *, drop: str | None = None, finish: object = None) -> bytes:
    meta = {"id": "x", "prompt_tokens": len(PROMPT), "completion_tokens": 2, "cached_tokens": 0,
            "finish_reason": finish or {"type": "stop", "matched": 200_001}, "output_token_logprobs": triples}
    out = {"text": "hi", "output_ids": output_ids, "meta_info": meta}
    if drop is not None:
        out.pop(drop, None)
        meta.pop(drop, None)
    return json.dumps(out).encode()


def test_a_sglang_call_sends_input_ids_and_reads_output_ids_and_logprobs(sglang: FaultServer):
    sglang.script([Reply(text="hi", completion_token_ids=[104, 105, 200_001])])
    with TokenExactClient(sglang.base_url) as client:
        envelope = client.call(ASK)
    assert envelope.status.value == "COMPLETED", envelope.error
    assert envelope.engine == "sglang 0.5.4" and envelope.finish_reason == "stop"
    assert envelope.prompt_token_ids == tuple(PROMPT) and envelope.completion_token_ids == (104, 105, 200_001)
    assert [e["id"] for e in envelope.logprobs or ()] == [104, 105, 200_001]
    assert (envelope.usage.prompt_tokens, envelope.usage.completion_tokens) == (len(PROMPT), 3)
    (request,) = sglang.requests
    sent = json.loads(request.body)
    assert request.path == "/generate" and sent["input_ids"] == PROMPT
    assert sent["return_logprob"] is True and sent["top_logprobs_num"] == 1
    assert sent["sampling_params"] == {"max_new_tokens": 4, "temperature": 0.0}


@pytest.mark.parametrize(("answer", "named"), [
    (generated([104, 105], [[-0.5, 104, None]]), "answered 1 logprobs for 2 sampled ids"),
    (generated([104, 105], [[-0.5, 104, None]] * 3), "answered 3 logprobs for 2 sampled ids"),
    (generated([104, 105], [[-0.5, 104, None], [-0.5, 7, None]]), "logprobs for other ids than output_ids"),
    (generated([104, 105], [[-0.5, "104", None], [-0.5, 105, None]]), "no readable logprobs"),
    (generated(None, [[-0.5, 104, None]], drop="output_ids"), "without its text, sampled ids and meta_info"),
    (generated([104, 105], None, drop="output_token_logprobs"), "no readable logprobs"),
    (generated([104, 105], [[-0.5, 104, None], [-0.5, 105, None]], finish={"type": "abort", "message": "oom"}),
     "without a finish reason stop or length"),
], ids=["fewer-logprobs", "more-logprobs", "other-ids", "string-id", "no-output-ids", "no-logprobs", "aborted"])
def test_a_sglang_answer_that_does_not_pair_up_is_faulted_and_kept(sglang: FaultServer, answer: bytes, named: str):
    sglang.script([RawResponse(body=answer)])
    with TokenExactClient(sglang.base_url) as client:
        envelope = client.call(ASK)
    assert envelope.status.value == "FAULTED" and envelope.error is not None
    assert named in envelope.error.message, envelope.error.message
    assert envelope.raw_response == answer.decode() and envelope.engine == "sglang 0.5.4"


@pytest.mark.parametrize(("reply", "problem"), [
    (Reply(text="hi", completion_token_ids=[104, 105], usage={"completion_tokens": 5}),
     "2 sampled ids, usage.completion_tokens 5"),
    (Reply(text="hi", completion_token_ids=[104, 105], usage={"prompt_tokens": 3}),
     f"{len(PROMPT)} prompt ids, usage.prompt_tokens 3"),
    (Reply(text="hi", completion_token_ids=[104, -5]), "sampled id -5 at position 1 is negative"),
    (Reply(text="hi", completion_token_ids=[104, 300_000]), "sampled id 300000 at position 1 is out of the vocabulary"),
], ids=["completion-usage", "prompt-usage", "negative", "out-of-vocabulary"])
def test_sglang_ids_that_contradict_usage_or_the_vocabulary_are_kept_and_flagged(sglang: FaultServer, reply: Reply,
                                                                                 problem: str):
    sglang.script([reply])
    with TokenExactClient(sglang.base_url) as client:
        envelope = client.call(ASK)
    assert envelope.status.value == "COMPLETED"  # recorded as sent, never repaired
    assert envelope.completion_token_ids == tuple(reply.completion_token_ids or ())
    (call,) = check_envelopes("run", [("c1", 0, envelope)], vocab_size=262_144).calls
    assert any(problem in p for p in call.problems), call.problems


def test_tokenizer_files_not_readable_here_are_refused_before_the_first_call(tmp_path, monkeypatch):
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path / "home"))
    example = Path(__file__).resolve().parents[2] / "examples" / "calculator"
    with FaultServer(endpoints=sglang_endpoints(tmp_path / "absent")) as server:
        result = CliRunner().invoke(app, run_args(example, server.base_url.removesuffix("/v1")))
        assert isinstance(result.exception, TokenizerError), result.output
        assert result.exception.exit_code == 2 and "not a directory readable here" in result.exception.message
        assert server.requests == []  # no /generate asked for
    assert not (tmp_path / "home" / "escrow.db").exists()


READ = '<tool name="read_file">{"path": "calc.py"}</tool>'
SUBMIT = '<tool name="submit">{"summary": "done"}</tool>'


@pytest.mark.docker
def test_a_token_exact_run_on_sglang_grows_by_the_sampled_ids_and_the_delta_and_is_clean(
        sglang: FaultServer, tmp_path, sandbox_image, sandbox_runtime):
    # The first answer's sampled ids are not what its text re-encodes to:
    # only ids carried as sampled match them.
    sampled = [300_000, *ids(READ)[1:]]
    db, run_id, (first, second), asked = token_exact_run(
        sglang, tmp_path, [Reply(text=READ, completion_token_ids=sampled),
                           Reply(text=SUBMIT, completion_token_ids=ids(SUBMIT))], sandbox_runtime)
    assert all(b["return_logprob"] is True for b in (first, second))
    # Turn 1's prompt: turn 0's prompt, its sampled ids, then what the
    # template writes after an answer - nothing re-rendered.
    after = [m.to_wire() for m in asked[1][len(asked[0]) + 1:]]
    assert second["input_ids"] == first["input_ids"] + sampled + ids("<|im_end|>\n" + render(after, "chatml"))
    assert first["input_ids"] == ids(render([m.to_wire() for m in asked[0]], "chatml"))

    checked, data = tokens_cli(db, run_id, "--json")
    assert checked.exit_code == 0, checked.output
    assert [c["token_class"] for c in data["calls"]] == ["CLEAN", "CLEAN"]
    assert all(c["problems"] == [] for c in data["calls"])
    checked, data = tokens_cli(db, run_id, "--json", "--rebuild", "--model-url",
                               sglang.base_url.removesuffix("/v1"))
    assert checked.exit_code == 0, checked.output
    assert [(r["position"], r["recorded"]) for r in data["rebuilt"]] == [
        (None, len(first["input_ids"])), (None, len(second["input_ids"]))]


# The token client attempts a call as the chat client does (calls.Retrier,
# run_attempt's watchdog): shown here on SGLang, the same for every engine.

def test_a_503_then_an_answer_is_retried_and_both_attempts_recorded(sglang: FaultServer):
    sglang.script([Fault.http(503, retry_after=0), Reply(text="hi", completion_token_ids=[104, 105])])
    waits: list[float] = []
    with TokenExactClient(sglang.base_url, sleep=waits.append) as client:
        envelope = client.call(ASK)
    assert envelope.status.value == "COMPLETED" and envelope.completion_token_ids == (104, 105)
    assert [(a.status.value, a.http_status) for a in envelope.attempts] == [
        ("TRANSPORT_FAILURE", 503), ("COMPLETED", 200)]
    assert envelope.attempts[0].error is not None and envelope.attempts[0].error.kind == "unavailable"
    assert len(waits) == 1  # one backoff, between the two attempts
    first, second = (json.loads(r.body) for r in sglang.requests)
    assert first["input_ids"] == second["input_ids"] == PROMPT  # the same prompt, sent again


def test_a_500_is_not_retried(sglang: FaultServer):
    sglang.script([Fault.http(500), Reply(text="never asked")])
    with TokenExactClient(sglang.base_url, sleep=lambda s: None) as client:
        envelope = client.call(ASK)
    assert envelope.status.value == "FAULTED" and envelope.error is not None
    assert envelope.error.kind == "engine_error" and len(envelope.attempts) == 1 and len(sglang.requests) == 1


def test_an_answer_trickling_past_the_deadline_is_cut_as_the_chat_client_cuts_it(sglang: FaultServer):
    # A byte every 50 ms never trips a per-read timeout; T_max over the
    # whole call does, and the watchdog hangs up mid-body.
    body = generated([104, 105], [[-0.5, 104, None], [-0.5, 105, None]]) + b" " * 4000
    sglang.script([RawResponse(body=body, piece_bytes=1, pause_s=0.05)])
    with TokenExactClient(sglang.base_url) as client:
        envelope = client.call(ASK.model_copy(update={"deadline_s": 1.0}))
    assert envelope.status.value == "TRANSPORT_FAILURE" and envelope.error is not None
    assert envelope.error.kind == "deadline" and "T_max expired" in envelope.error.message
    assert len(envelope.attempts) == 1 and len(sglang.requests) == 1  # a deadline is never retried
    kept = envelope.raw_response or ""
    assert 0 < len(kept) < len(body)  # what came before the cut is kept; the rest was never read
    assert body.decode().startswith(kept)
