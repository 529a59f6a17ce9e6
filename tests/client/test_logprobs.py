"""``--logprobs K``: per-token logprobs, top-k and token ids recorded as the
engine sent them, over loopback HTTP, and ``escrow export --tokens``."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import Fault
from orchestrator.adapters.model_client.client import ModelClient
from tests.client.test_parity import record_run, request
from tests.client.wire_frames import FRAMINGS, chunk, frame


def llama_entry(token: str, token_id: int, alternatives: list[tuple[str, int, float]]) -> dict:
    """llama-server's chat logprob entry: ``id`` on the token and on each alternative."""
    return {
        "id": token_id,
        "token": token,
        "logprob": alternatives[0][2],
        "bytes": list(token.encode()),
        "top_logprobs": [{"id": i, "token": t, "logprob": lp, "bytes": list(t.encode())} for t, i, lp in alternatives],
    }


def llama_answer() -> bytes:
    entries = [llama_entry("Hi", 17534, [("Hi", 17534, -0.1), ("Hello", 9259, -2.4)]),
               llama_entry("!", 236888, [("!", 236888, -0.3), (".", 236761, -1.5)])]
    events = []
    for e in entries:
        c = chunk({"content": e["token"]})
        c["choices"][0]["logprobs"] = {"content": [e]}
        events.append(("data", c))
    return frame(events + [("data", chunk(finish="stop")), ("data", "[DONE]")], FRAMINGS[0])


def vllm_answer() -> bytes:
    """vLLM with ``return_token_ids``: ids on the choice and the prompt's at the top."""
    first = chunk({"role": "assistant", "content": "Hi"}, prompt_token_ids=[2, 105, 2364])
    first["choices"][0]["token_ids"] = [17534]
    second = chunk({"content": "!"})
    second["choices"][0]["token_ids"] = [236888]
    return frame([("data", first), ("data", second), ("data", chunk(finish="stop")), ("data", "[DONE]")], FRAMINGS[1])


def test_logprobs_top_k_and_llama_token_ids_are_recorded(srv):
    srv.script([Fault.raw_stream(llama_answer())])
    with ModelClient(srv.base_url) as client:
        env = client.call(request(0))
    sent = srv.requests[0].json
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 2)
    assert env.completion_token_ids == (17534, 236888) and env.top_logprobs == 2
    assert [e["top_logprobs"][1]["token"] for e in env.logprobs] == ["Hello", "."]


def test_vllm_token_ids_are_recorded(srv):
    srv.script([Fault.raw_stream(vllm_answer(), piece_bytes=1)])
    with ModelClient(srv.base_url) as client:
        env = client.call(request(0))
    assert env.prompt_token_ids == (2, 105, 2364) and env.completion_token_ids == (17534, 236888)


def test_export_tokens_writes_token_faithful_lines(srv, tmp_path):
    srv.script([Fault.raw_stream(llama_answer()), Fault.raw_stream(vllm_answer()), Fault.raw_stream(frame(
        [("data", chunk({"content": "plain"})), ("data", chunk(finish="stop"))], FRAMINGS[0]))])
    db = tmp_path / "escrow.db"
    run_id = record_run(db, srv.base_url, [request(0), request(1), request(2)])
    result = CliRunner().invoke(app, ["export", run_id, "--tokens", "--db", f"sqlite:///{db}"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["turn"] for line in lines] == [0, 1, 2]
    llama, vllm, plain = lines
    assert llama["completion_token_ids"] == [17534, 236888] and llama["completion_tokens"] == ["Hi", "!"]
    assert llama["completion_logprobs"] == [-0.1, -0.3] and llama["top_logprobs"][0][1] == {
        "token": "Hello",
        "id": 9259,
        "logprob": -2.4,
    }
    assert vllm["prompt_token_ids"] == [2, 105, 2364] and vllm["token_faithful"] is True
    assert (plain["token_faithful"], plain["completion_token_ids"], plain["completion_text"]) == (False, None, "plain")
    assert llama["prompt_messages"] == [{"role": "user", "content": "step 0"}]


def test_logprobs_setting_flows_from_flags_env_and_file_into_the_run_sampling(tmp_path, monkeypatch):
    import pytest

    from orchestrator.composition.launch.compose import sampling_of
    from orchestrator.errors import ConfigError
    from orchestrator.settings import load_settings

    monkeypatch.setenv("ESCROW_HOME", str(tmp_path))
    assert sampling_of(load_settings()).logprobs is False
    monkeypatch.setenv("ESCROW_LOGPROBS", "3")
    assert (sampling_of(load_settings()).logprobs, sampling_of(load_settings()).top_logprobs) == (True, 3)
    assert sampling_of(load_settings(logprobs=5)).top_logprobs == 5  # a flag wins over the environment
    with pytest.raises(ConfigError, match="logprobs"):
        load_settings(logprobs=99)


LLAMA_PROPS = {"build_info": "b11434-unknown", "total_slots": 1, "default_generation_settings": {
    "n_ctx": 2048, "params": {"cache_prompt": True, "post_sampling_probs": False}}}


def test_the_logprobs_mode_is_the_engines_report_once_probed():
    from orchestrator.adapters.fault_server import FaultServer

    with FaultServer(endpoints={"/props": LLAMA_PROPS}) as server:
        server.script([Fault.raw_stream(llama_answer()), Fault.raw_stream(llama_answer())])
        with ModelClient(server.base_url) as client:
            unprobed = client.call(request(0))
            assert client.engine_info().settings["logprobs_mode"] == "raw"
            probed = client.call(request(1))
    assert (unprobed.logprobs_mode, probed.logprobs_mode) == (None, "raw (engine)")
    assert "logprobs_mode" not in unprobed.model_dump(mode="json")  # old envelopes hash as before


def test_a_mode_the_request_set_wins_over_the_engines_default(srv):
    srv.script([Fault.raw_stream(llama_answer())])
    req = request(0)
    req = req.model_copy(update={"sampling": req.sampling.model_copy(update={"extra": {"post_sampling_probs": True}})})
    with ModelClient(srv.base_url) as client:
        env = client.call(req)
    assert srv.requests[0].json["post_sampling_probs"] is True and env.logprobs_mode == "post_sampling (request)"


def test_post_sampling_probabilities_are_read_as_logprobs():
    """llama.cpp with ``post_sampling_probs`` sends ``prob`` and ``top_probs``."""
    import math

    from orchestrator.logprobs import read_logprobs

    entry = {"id": 17534, "token": "Hi", "prob": 0.5, "bytes": [72, 105],
             "top_probs": [{"id": 17534, "token": "Hi", "prob": 0.5}, {"id": 9259, "token": "Hello", "prob": 0.25}]}
    (token,) = read_logprobs([entry])
    assert token.logprob == math.log(0.5)
    assert [(a.token_id, a.logprob) for a in token.top] == [(17534, math.log(0.5)), (9259, math.log(0.25))]
    (zero,) = read_logprobs([{**entry, "prob": 0.0}])
    assert zero.logprob == float("-inf")


def test_export_tokens_names_its_format_and_warns_when_no_call_carried_ids(srv, tmp_path):
    """Issue 42, group 14: --tokens closed with "as messages-jsonl" (the
    format it replaces) and said nothing when no line had an id."""
    plain = [("data", chunk({"content": "plain"})), ("data", chunk(finish="stop"))]
    srv.script([Fault.raw_stream(llama_answer()), Fault.raw_stream(frame(plain, FRAMINGS[0])),
                Fault.raw_stream(frame(plain, FRAMINGS[0]))])
    db = tmp_path / "escrow.db"
    with_ids = record_run(db, srv.base_url, [request(0), request(1)])
    without = record_run(db, srv.base_url, [request(0)])

    said = {}
    for run_id in (with_ids, without):
        result = CliRunner().invoke(app, ["export", run_id, "--tokens", "--db", f"sqlite:///{db}"],
                                    env={"COLUMNS": "80"})
        assert result.exit_code == 0, result.output
        said[run_id] = " ".join(result.stderr.split())
    assert "messages-jsonl" not in said[with_ids] + said[without]
    assert "token lines (--tokens): 2 call(s), 1 with token ids" in said[with_ids] and "warning" not in said[with_ids]
    assert "token lines (--tokens): 1 call(s), 0 with token ids" in said[without]
    assert "warning: no call carried token ids" in said[without]
