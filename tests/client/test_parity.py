"""``escrow parity`` against scripted servers (one token changed, near-tied
tokens swapped, a tool argument changed, a status changed) and against the
local llama.cpp server, where temperature 0 and one slot give identity."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import Fault
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.envelope import Envelope, Status
from orchestrator.errors import ConfigError, EscrowError
from orchestrator.logprobs import read_logprobs
from orchestrator.parity import compare, token_divergence
from store import Recorder, Store
from store.write import synthetic
from tests.client.wire_frames import FRAMINGS, chunk, frame

# Each token with its top-2: the recorded answer is "The cat sat", and at
# position 1 "cat" and "dog" are near-tied.
RECORDED = [("The", [("The", -0.01), ("A", -4.6)]), (" cat", [(" cat", -0.69), (" dog", -0.70)]),
            (" sat", [(" sat", -0.05), (" ran", -3.0)])]
NEAR_TIE = [("The", [("The", -0.01), ("A", -4.6)]), (" dog", [(" dog", -0.69), (" cat", -0.70)]),
            (" ran", [(" ran", -0.05), (" sat", -3.0)])]
REAL = [("The", [("The", -0.01), ("A", -4.6)]), (" cat", [(" cat", -0.69), (" dog", -0.70)]),
        (" exploded", [(" exploded", -0.02), (" burst", -4.0)])]
TOOL = {
    "index": 0,
    "id": "call_1",
    "type": "function",
    "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
}


def token_chunk(token: str, top: list[tuple[str, float]]) -> dict:
    out = chunk({"content": token})
    entry = {"token": token, "logprob": top[0][1], "bytes": list(token.encode()),
             "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top]}
    out["choices"][0]["logprobs"] = {"content": [entry]}
    return out


def answer(tokens, *, arguments: str = '{"path": "a.py"}', finish: str = "tool_calls") -> bytes:
    call = {**TOOL, "function": {**TOOL["function"], "arguments": arguments}}
    events = [("data", token_chunk(t, top)) for t, top in tokens]
    events += [("data", chunk({"tool_calls": [call]})), ("data", chunk(finish=finish)), ("data", "[DONE]")]
    return frame(events, FRAMINGS[0])


def request(turn: int) -> ModelRequest:
    return ModelRequest(model="fault-model", messages=(Message(role="user", content=f"step {turn}"),), max_tokens=32,
                        sampling=Sampling(temperature=0.0, logprobs=True, top_logprobs=2))


def record_run(db_path, base_url: str, requests: list[ModelRequest],
               answered: tuple[Status, ...] = (Status.COMPLETED,)) -> str:
    """Call the server for real and record request and envelope per turn."""
    with Store.open(f"sqlite:///{db_path}") as store, ModelClient(base_url) as client:
        recorder = Recorder(store)
        run_id = synthetic.start(recorder, random.Random(7))
        for turn, req in enumerate(requests):
            envelope = client.call(req)
            assert envelope.status in answered, envelope.error
            with recorder.turn(run_id, turn) as tx:
                call_id = tx.request(req)
                tx.envelope(call_id, envelope)
                tx.commit(
                    [Message(role="assistant", content=envelope.payload.text, tool_calls=envelope.payload.tool_calls)]
                )
        recorder.finish_run(run_id, "PASS", "ok", turn=len(requests))
    return run_id


def parity(db_path, run_id: str, url: str, *extra: str):
    result = CliRunner().invoke(
        app, ["parity", run_id, "--model-url", url, "--db", f"sqlite:///{db_path}", "--json", *extra]
    )
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip().startswith("{") else result.output


@pytest.fixture
def recorded_run(srv, tmp_path):
    srv.script([Fault.raw_stream(answer(RECORDED)), Fault.raw_stream(answer(RECORDED))])
    db = tmp_path / "escrow.db"
    return db, record_run(db, srv.base_url, [request(0), request(1)])


def test_an_unchanged_server_is_identical(srv, recorded_run):
    db, run_id = recorded_run
    srv.script([Fault.raw_stream(answer(RECORDED))], cycle=True)
    code, report = parity(db, run_id, srv.base_url, "--repeat", "2")
    assert code == 0, report
    assert report["verdicts"] == {"identical": 2, "near_tie": 0, "divergent": 0, "status_changed": 0}
    assert report["noisy_calls"] == 0
    # Every recorded request went out unchanged, twice each (--repeat 2).
    sent = [r.body for r in srv.requests[2:]]
    assert len(sent) == 4 and sent[0] == sent[1] == srv.requests[0].body


def test_swapped_near_tied_tokens_are_a_near_tie(srv, recorded_run):
    db, run_id = recorded_run
    srv.script([Fault.raw_stream(answer(NEAR_TIE)), Fault.raw_stream(answer(RECORDED))])
    code, report = parity(db, run_id, srv.base_url)
    assert code == 0, report
    first = report["calls"][0]["comparison"]
    assert first["verdict"] == "near_tie"
    assert first["divergence"] == {
        "position": 1,
        "unit": "token",
        "recorded": " cat",
        "replayed": " dog",
        "near_tie": True,
    }
    assert report["calls"][1]["comparison"]["verdict"] == "identical"


def test_a_changed_token_outside_top_k_is_a_real_divergence(srv, recorded_run):
    db, run_id = recorded_run
    srv.script([Fault.raw_stream(answer(RECORDED)), Fault.raw_stream(answer(REAL))])
    code, report = parity(db, run_id, srv.base_url)
    assert code == 1
    second = report["calls"][1]["comparison"]
    assert (second["verdict"], second["divergence"]["position"], second["divergence"]["near_tie"]) == (
        "divergent",
        2,
        False,
    )
    assert report["real_differences"] == 1


def test_a_changed_tool_argument_is_a_real_divergence(srv, recorded_run):
    db, run_id = recorded_run
    srv.script([Fault.raw_stream(answer(RECORDED, arguments='{"path": "b.py"}')), Fault.raw_stream(answer(RECORDED))])
    code, report = parity(db, run_id, srv.base_url)
    assert code == 1
    first = report["calls"][0]["comparison"]
    assert (first["verdict"], first["divergence"], first["tool_calls_equal"]) == ("divergent", None, False)
    assert "a.py" in first["tool_call_difference"] and "b.py" in first["tool_call_difference"]


def test_a_changed_status_is_reported(srv, recorded_run):
    db, run_id = recorded_run
    srv.script([Fault.raw_stream(answer(RECORDED, finish="length")), Fault.raw_stream(answer(RECORDED))])
    code, report = parity(db, run_id, srv.base_url)
    assert code == 1
    first = report["calls"][0]["comparison"]
    assert (first["verdict"], first["recorded_status"], first["replayed_status"]) == (
        "status_changed",
        "COMPLETED",
        "TRUNCATED",
    )


def test_repeat_counts_the_engines_own_noise(srv, recorded_run):
    db, run_id = recorded_run
    srv.script(
        [
            Fault.raw_stream(answer(RECORDED)),
            Fault.raw_stream(answer(NEAR_TIE)),
            Fault.raw_stream(answer(RECORDED)),
            Fault.raw_stream(answer(RECORDED)),
            Fault.raw_stream(answer(RECORDED)),
            Fault.raw_stream(answer(RECORDED)),
        ]
    )
    code, report = parity(db, run_id, srv.base_url, "--repeat", "3")
    assert code == 0
    assert [c["noise"] for c in report["calls"]] == [1, 0] and report["noisy_calls"] == 1


def test_near_tie_needs_each_token_in_the_others_top_k():
    one_sided = [("The", [("The", -0.01), ("A", -4.6)]), (" dog", [(" dog", -0.2), (" cow", -2.0)])]
    a = read_logprobs([token_chunk(t, top)["choices"][0]["logprobs"]["content"][0] for t, top in RECORDED])
    b = read_logprobs([token_chunk(t, top)["choices"][0]["logprobs"]["content"][0] for t, top in one_sided])
    assert token_divergence(a, b).near_tie is False  # " dog" is in the record's top-k, " cat" not in the new one's


def test_token_ids_are_compared_when_present():
    a = read_logprobs(
        [{"token": "x", "id": 5, "logprob": -0.1, "top_logprobs": [{"token": "x", "id": 5, "logprob": -0.1}]}]
    )
    b = read_logprobs(
        [{"token": "x", "id": 6, "logprob": -0.1, "top_logprobs": [{"token": "x", "id": 6, "logprob": -0.1}]}]
    )
    assert token_divergence(a, b).position == 0  # same text, different token: a real difference
    assert compare(Envelope(status=Status.COMPLETED), Envelope(status=Status.COMPLETED)).verdict == "identical"


def test_llama_server_is_identical_to_itself(llama_url, tmp_path):
    """Temperature 0 on a one-slot llama.cpp server: a re-send is the same answer."""
    base = f"{llama_url}/v1"
    requests = [ModelRequest(model="gemma", messages=(Message(role="user", content="Say hi in three words."),),
                             max_tokens=12, sampling=Sampling(temperature=0.0, seed=1, logprobs=True, top_logprobs=3))]
    db = tmp_path / "escrow.db"
    run_id = record_run(db, base, requests, answered=(Status.COMPLETED, Status.TRUNCATED))
    code, report = parity(db, run_id, base)
    assert code == 0, report
    assert report["verdicts"]["identical"] == 1
    assert report["engine"] == "llama-cpp-python"


def test_text_report_and_bad_input(srv, recorded_run):
    db, run_id = recorded_run
    srv.script([Fault.raw_stream(answer(NEAR_TIE)), Fault.raw_stream(answer(REAL))])
    result = CliRunner().invoke(app, ["parity", run_id, "--model-url", srv.base_url, "--db", f"sqlite:///{db}"])
    assert result.exit_code == 1
    shown = " ".join(result.stdout.split())  # the report folds its lines to the width
    assert "near-tie; first difference at token 1: ' cat' vs ' dog'" in shown
    assert "divergent; first difference at token 2: ' sat' vs ' exploded'" in shown
    assert "2 calls: 1 near-tie, 1 divergent" in shown
    down = CliRunner().invoke(app, ["parity", run_id, "--model-url", "http://127.0.0.1:9/v1", "--db", f"sqlite:///{db}"])
    assert isinstance(down.exception, ConfigError) and "no server answered" in str(down.exception)
    missing = CliRunner().invoke(app, ["parity", "nosuchrun", "--model-url", srv.base_url, "--db", f"sqlite:///{db}"])
    assert isinstance(missing.exception, EscrowError)  # a clean CLI message through escrow's main
