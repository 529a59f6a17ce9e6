"""``escrow batch --token-exact`` and the library entry point's
``token_exact``: the fault server poses as vLLM's token-in endpoint, each
task's known fix written in the text tool protocol with the toy tokenizer's
ids (``example_scripts(..., text=True)``).

One batch of two tasks as a real process, each run CLEAN on every call, one
``/tokenize`` round trip a turn, its rollout's masked ids the ids the server
sampled; an engine that takes no prompt as ids and the wrong tool protocol
refused before a batch is recorded, and not retried as infrastructure when
only a run can find it (a ``{task_id}`` URL); ``run_agent`` honouring the
setting."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer, Reply
from orchestrator.adapters.fault_server.chat_tokens import ids
from orchestrator.adapters.model_client.token_exact import TokenExactClient
from orchestrator.composition.batch.scripted import example_scripts
from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.errors import EscrowError, TokenExactUnsupported
from orchestrator.exit_codes import ExitCode
from tests.batch.conftest import EXAMPLES, subset_task_file
from tests.processes import run_escrow
from tests.tokens.test_token_exact import EXAMPLE
from tests.tokens.test_token_exact_vllm import VLLM

TASKS = ("calc-mean", "chunks-tail")


@pytest.fixture
def vllm() -> Iterator[FaultServer]:
    with FaultServer(endpoints=VLLM) as server:
        yield server


def batch_args(tasks: Path, url: str, *extra: str) -> list[str]:
    return ["batch", str(tasks), "--model-url", url, "--workers", "1", "--context-window", "8192",
            "--max-turns", "6", "--token-exact", "--tool-protocol", "text", *extra]


@pytest.mark.docker
def test_a_token_exact_batch_is_clean_on_every_call_and_exports_the_sampled_ids(
        vllm: FaultServer, tmp_path, sandbox_image, sandbox_runtime):
    tasks = subset_task_file(tmp_path, TASKS)
    scripts = example_scripts(EXAMPLES, text=True)
    for task_id in TASKS:
        vllm.script_for(task_id, scripts[task_id])
    home = tmp_path / "home"
    # An offline tokenizer for the context budget: the server's /tokenize would count each message too.
    done = run_escrow(home, *batch_args(tasks, f"http://127.0.0.1:{vllm.port}/k/{{task_id}}/v1", "--json",
                                        "--tokenizer", "cl100k_base", "--runtime", sandbox_runtime), timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    runs = {t["task_id"]: t["run_id"] for t in report["tasks"]}
    assert report["passed"] == len(TASKS) and set(runs) == set(TASKS), done.stdout

    for task_id, run_id in runs.items():
        checked = run_escrow(home, "tokens", run_id, "--json")
        assert checked.returncode == 0, checked.stderr
        calls = json.loads(checked.stdout)["calls"]
        assert len(calls) == len(scripts[task_id])
        assert all(c["token_class"] == "CLEAN" and c["problems"] == [] for c in calls), calls
        sent = [path.removeprefix(f"/k/{task_id}") for path in vllm.hits if path.startswith(f"/k/{task_id}/")]
        asked = [n for n, path in enumerate(sent) if path == "/v1/completions"]
        assert len(asked) == len(calls) and "/v1/chat/completions" not in sent
        # Each prompt went as ids, and between two completions the only round
        # trips are the loop's own renders (how many: the test below).
        assert all(set(sent[a + 1:b]) == {"/tokenize"} for a, b in zip(asked, asked[1:], strict=False)), sent

    exported = run_escrow(home, "export", "--batch", report["batch_id"], "--format", "rollout")
    assert exported.returncode == 0, exported.stderr
    rows = {row["run_id"]: row for row in map(json.loads, exported.stdout.splitlines())}
    assert set(rows) == set(runs.values())
    for task_id, run_id in runs.items():
        row = rows[run_id]
        masked = [i for i, m in zip(row["input_ids"], row["loss_mask"], strict=True) if m]
        sampled = [i for step in scripts[task_id] if isinstance(step, Reply) for i in step.completion_token_ids or ()]
        assert masked == sampled and row["reward"] == 1.0 and row["engine"] == "vllm 0.11.0"


def batches(home: Path) -> list[object]:
    listed = CliRunner().invoke(app, ["batch", "list", "--json", "--db", f"sqlite:///{home / 'escrow.db'}"])
    assert listed.exit_code == 0, listed.output
    return json.loads(listed.stdout)


@pytest.mark.parametrize(("extra", "named"), [
    ((), "which only llama.cpp's llama-server (/completion), vLLM"),
    (("--tool-protocol", "native"), "use --tool-protocol text"),
], ids=["chat-only-engine", "native-tool-protocol"])
def test_a_batch_that_cannot_be_token_exact_is_refused_before_it_is_recorded(fault_server: FaultServer, tmp_path,
                                                                             extra, named):
    # Was: a batch recorded, each task retried as an infrastructure failure
    # (the engine) or ended a task error (the protocol), exit 1.
    tasks = subset_task_file(tmp_path, TASKS[:1])
    home = tmp_path / "home"
    result = CliRunner(env={"ESCROW_HOME": str(home)}).invoke(app, batch_args(tasks, fault_server.base_url, *extra))
    assert isinstance(result.exception, EscrowError), result.output
    assert result.exception.exit_code == ExitCode.USAGE and named in result.exception.message
    assert fault_server.requests == []  # no completion asked for
    assert batches(home) == []


def test_an_engine_that_takes_no_prompt_of_ids_behind_a_task_url_is_a_task_error_not_retried(
        fault_server: FaultServer, tmp_path):
    """A ``{task_id}`` URL is left to each run: its refusal is the task's
    error, once, not an infrastructure failure tried three times."""
    tasks = subset_task_file(tmp_path, TASKS[:1])
    home = tmp_path / "home"
    url = f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1"
    result = CliRunner(env={"ESCROW_HOME": str(home)}).invoke(app, [*batch_args(tasks, url), "--json"])
    assert result.exit_code == ExitCode.FINDING, result.output
    (task,) = json.loads(result.stdout)["tasks"]
    assert (task["outcome"], task["attempts"], task["run_id"]) == ("task", 1, None), task
    assert "TokenExactUnsupported" in task["error"]
    assert fault_server.requests == []


def test_the_library_entry_point_takes_token_exact(fault_server: FaultServer, tmp_path):
    """``run_agent`` reads ``Settings.token_exact``: against an engine that
    takes no prompt of ids it refuses before a sandbox starts or a run is
    recorded, as ``escrow run --token-exact`` does."""
    from orchestrator.composition.launch import RunRequest, run_agent
    from orchestrator.settings import load_settings

    settings = load_settings(None, home=tmp_path / "home", model_url=fault_server.base_url, token_exact=True,
                             tool_protocol="text")
    with pytest.raises(TokenExactUnsupported) as refused:
        run_agent(settings, RunRequest(task="Fix mean().", repo=EXAMPLE,
                                       verify="python3 -m pytest -q"))
    assert "is openai-compatible" in refused.value.message
    assert fault_server.requests == [] and not (tmp_path / "home" / "escrow.db").exists()


def test_each_turn_costs_one_render_round_trip_besides_its_completion(vllm: FaultServer):
    """Issue 40's claim: --token-exact adds at most one HTTP round trip a
    turn. On vLLM that is one /tokenize (render and tokenize at once)."""
    replies = [Reply(text=text, completion_token_ids=ids(text)) for text in ("one", "two", "three")]
    vllm.script(replies)
    messages: tuple[Message, ...] = (Message(role="user", content="Say hi."),)
    spent = []
    with TokenExactClient(vllm.base_url, model="m") as client:
        client.prepare()
        for turn in range(len(replies)):
            before = len(vllm.hits)
            envelope = client.call(ModelRequest(model="m", messages=messages, max_tokens=8,
                                                sampling=Sampling(temperature=0.0)))
            assert envelope.status.value == "COMPLETED", envelope.error
            spent.append(vllm.hits[before:])
            messages = (*messages, Message(role="assistant", content=envelope.payload.text),
                        Message(role="user", content=f"result {turn}"))
    assert spent == [["/tokenize", "/v1/completions"]] * len(replies)
