"""Runs recorded over real loopback HTTP from the fault server, with token
ids in each engine's own fields."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer, Reply
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.envelope import Envelope
from store.store import Store
from store.write import synthetic
from store.write.recorder import Recorder

EOT, NL = 106, 107


def request(turn: int, *, logprobs: bool = True) -> ModelRequest:
    return ModelRequest(model="fault-model", messages=(Message(role="user", content=f"step {turn}"),), max_tokens=32,
                        sampling=Sampling(temperature=0.0, logprobs=logprobs, top_logprobs=1 if logprobs else None))


def record(db: Path, base_url: str, turns: int, *, verdict: str = "PASS") -> tuple[str, list[Envelope]]:
    """Call the server ``turns`` times and record each request and envelope,
    each answer kept as the next turn's history."""
    envelopes = []
    with Store.open(f"sqlite:///{db}") as store, ModelClient(base_url) as client:
        recorder = Recorder(store)
        run_id = synthetic.start(recorder, random.Random(7))
        for turn in range(turns):
            req = request(turn)
            envelope = client.call(req)
            envelopes.append(envelope)
            with recorder.turn(run_id, turn) as tx:
                call_id = tx.request(req)
                tx.envelope(call_id, envelope)
                tx.commit([Message(role="assistant", content=envelope.payload.text)])
        recorder.finish_run(run_id, verdict, "the verifier said so", turn=turns)
    return run_id, envelopes


def growing(turns: int, *, answer: int = 3, start: int = 5) -> list[Reply]:
    """Replies whose prompts each extend the last prompt and answer, as a
    token-faithful engine's would: turn t's prompt = turn t-1's prompt +
    its sampled ids + the template's end of turn and next user turn."""
    replies, prompt = [], [2, start]
    for turn in range(turns):
        sampled = [1000 + 10 * turn + i for i in range(answer - 1)] + [EOT]
        text = "".join(f"w{i} " for i in range(answer))[: 4 * answer]
        replies.append(Reply(text=text, prompt_token_ids=list(prompt), completion_token_ids=sampled))
        prompt = prompt + sampled + [NL, 105, 200 + turn]
    return replies


def tokens_cli(db: Path, run_id: str, *extra: str):
    result = CliRunner().invoke(app, ["tokens", run_id, "--db", f"sqlite:///{db}", *extra])
    data = json.loads(result.stdout) if "--json" in extra and result.stdout.strip().startswith("{") else None
    return result, data


@pytest.fixture
def srv(fault_server: FaultServer) -> FaultServer:
    return fault_server


def token_exact_run(server: FaultServer, tmp_path: Path, replies: list[Reply], runtime: str
                    ) -> tuple[Path, str, list[dict[str, Any]], list[tuple[Message, ...]]]:
    """A two-turn ``escrow run --token-exact`` of the calculator example
    against ``server`` scripted with ``replies``: the store's path, the run,
    the request bodies the server got and each answered call's messages."""
    import shutil

    from orchestrator.token_drift import answered_calls
    from tests.tokens.test_token_exact import run_args

    repo = tmp_path / "calculator"
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "calculator", repo,
                    ignore=shutil.ignore_patterns(".benchmarks", "__pycache__", ".pytest_cache"))
    server.script(replies)
    home = tmp_path / "home"
    result = CliRunner(env={**os.environ, "ESCROW_HOME": str(home)}).invoke(app, [
        *run_args(repo, server.base_url.removesuffix("/v1")), "--max-turns", "2", "--runtime", runtime,
        "--context-window", "4096", "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    run_id = json.loads(result.stdout)["run_id"]
    with Store.open(f"sqlite:///{home / 'escrow.db'}", readonly=True, create=False) as store:
        calls = [c for c in answered_calls(store.trajectory(run_id)) if c.response is not None]
        asked = [c.request().messages for c in calls]
    return home / "escrow.db", run_id, [json.loads(r.body) for r in server.requests], asked
