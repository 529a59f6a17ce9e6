"""The token checks on llama.cpp's own llama-server (Gemma 3 270M, started
here on its own port): its chat endpoint sends sampled ids (on each logprob
entry) and no prompt ids, so every call of a chat run is ABSENT, said so
and never guessed; the sampled ids are the engine's own (its /detokenize
gives back the recorded text) and agree with its usage; the rollout export
refuses the run with the reason."""

from __future__ import annotations

import random

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.adapters.model_client.token_endpoints import EngineTokens
from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.envelope import Status
from store import Recorder, Store
from store.read.reports import ExportError
from store.write import synthetic
from tests.conftest import require
from tests.llama_server import BINARY, MODEL, available, llama_server
from tests.tokens.conftest import tokens_cli


@pytest.fixture(scope="module")
def llama_cpp(tmp_path_factory) -> str:
    require(available(), f"llama-server at {BINARY} with {MODEL} (scripts/setup.sh escrow_setup_llama_server)")
    with llama_server(tmp_path_factory.mktemp("llama-server") / "server.log") as url:
        yield url


def test_a_chat_run_on_llama_server_is_absent_and_its_sampled_ids_are_the_engines(llama_cpp, tmp_path):
    db = tmp_path / "escrow.db"
    history = [Message(role="user", content="Name three colours.")]
    envelopes = []
    with Store.open(f"sqlite:///{db}") as store, ModelClient(f"{llama_cpp}/v1") as client:
        recorder = Recorder(store)
        run_id = synthetic.start(recorder, random.Random(40))
        client.engine_info()  # as a run does: the envelopes then name the engine
        for turn in range(2):
            request = ModelRequest(model="gemma-3-270m", messages=tuple(history), max_tokens=16,
                                   sampling=Sampling(temperature=0.0, logprobs=True, top_logprobs=1))
            envelope = client.call(request)
            assert envelope.status in (Status.COMPLETED, Status.TRUNCATED), envelope.error
            envelopes.append(envelope)
            with recorder.turn(run_id, turn) as tx:
                tx.envelope(tx.request(request), envelope)
                tx.commit([Message(role="assistant", content=envelope.payload.text)])
            history += [Message(role="assistant", content=envelope.payload.text),
                        Message(role="user", content="And three more?")]
        recorder.finish_run(run_id, "PASS", "ok", turn=2)
        assert store.verify(run_id).ok  # the ids agree with the engine's own counts

    with EngineTokens(llama_cpp) as engine:
        vocab = engine.vocab_size()
        for envelope in envelopes:
            ids = envelope.completion_token_ids
            assert envelope.prompt_token_ids is None and ids  # chat sends sampled ids only
            assert engine.detokenize(ids) == envelope.payload.text
    assert vocab is not None and vocab > max(i for e in envelopes for i in e.completion_token_ids or ())

    result, data = tokens_cli(db, run_id, "--json", "--model-url", llama_cpp)
    assert result.exit_code == 0, result.output
    assert [c["token_class"] for c in data["calls"]] == ["ABSENT", "ABSENT"] and data["vocab_size"] == vocab
    assert all(c["problems"] == [] and c["sampled_ids"] for c in data["calls"])

    refused = CliRunner().invoke(app, ["export", run_id, "--format", "rollout", "--db", f"sqlite:///{db}"])
    assert isinstance(refused.exception, ExportError)
    assert "has no prompt ids: the engine gave none" in refused.exception.message
