"""The token-in loop (``escrow run --token-exact``): each prompt is the last
prompt's ids + the sampled ids + what the engine's template writes after
them (the two-render delta), sent as ids to llama.cpp's own llama-server.

The delta's refusals at the mechanism; an engine that takes no token prompt
and a template that drops past answers refused before anything starts; one
real run on llama-server (Gemma 3 270M, a Gemma-style template) in a
sandbox whose every call is CLEAN, whose sampled ids decode to the recorded
text, whose rollout masks exactly the sampled ids, and whose prompts rebuild
the same at the token level - and a drift injected into its recording is
named at its position."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer
from orchestrator.adapters.model_client.token_endpoints import EngineTokens
from orchestrator.adapters.model_client.token_exact import rebuild_prompts
from orchestrator.adapters.model_client.token_sequence import SENTINEL, after_answer
from orchestrator.errors import TemplateNotPrefixPreserving, TokenExactUnsupported
from orchestrator.exit_codes import ExitCode
from orchestrator.token_drift import TokenClass, answered_calls, check_envelopes
from store import Store
from tests.conftest import require
from tests.llama_server import BINARY, MODEL, available, llama_server
from tests.tokens.conftest import tokens_cli

TEMPLATES = Path(__file__).parent / "templates"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calculator"
# A template that shows only the last answer (as templates that strip past
# reasoning do): what it rendered for turn t is not the start of turn t+1's.
DROPS_PAST_ANSWERS = (
    "{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
    "{% if m['role'] == 'assistant' and not loop.last %}(an earlier answer){% else %}{{ m['content'] }}{% endif %}"
    "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

BEFORE = "<start_of_turn>user\na<end_of_turn>\n<start_of_turn>model\n"
AFTER = "<end_of_turn>\n<start_of_turn>user\nb<end_of_turn>\n<start_of_turn>model\n"


def test_the_delta_is_what_the_template_writes_after_the_answer():
    assert after_answer(BEFORE, BEFORE + SENTINEL + AFTER) == AFTER


@pytest.mark.parametrize(("before", "after", "named"), [
    # the rendering of the longer conversation begins otherwise (a header counting the messages)
    ("1 message\n" + BEFORE, "3 messages\n" + BEFORE + SENTINEL + AFTER, "first difference at character 0"),
    # the earlier answer is not rendered as written (past reasoning stripped)
    (BEFORE, BEFORE + "(an earlier answer)" + AFTER, "does not render an earlier answer's text"),
    # the template writes its own text between its generation prompt and the answer
    (BEFORE, BEFORE + "<think>\n\n</think>\n\n" + SENTINEL + AFTER, "'<think>\\n\\n</think>\\n\\n'"),
])
def test_a_template_that_is_not_prefix_preserving_is_named(before, after, named):
    with pytest.raises(TemplateNotPrefixPreserving) as caught:
        after_answer(before, after)
    assert named in caught.value.message and "--token-exact" in caught.value.message


def run_args(repo: Path, url: str, *extra: str) -> list[str]:
    return ["run", "Fix the bug in mean() in calc.py.", "--repo", str(repo), "--verify", "python3 -m pytest -q",
            "--model-url", f"{url}/v1", "--token-exact", "--tool-protocol", "text", *extra]


def test_an_engine_that_takes_no_token_prompt_is_refused_before_the_run(fault_server: FaultServer, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(app, run_args(EXAMPLE, fault_server.base_url.removesuffix("/v1")))
    assert isinstance(result.exception, TokenExactUnsupported), result.output
    assert result.exception.exit_code == ExitCode.USAGE
    assert "only llama.cpp's llama-server (/completion), vLLM (/v1/completions) and SGLang" in (
        result.exception.message)
    native = CliRunner().invoke(app, [*run_args(EXAMPLE, fault_server.base_url.removesuffix("/v1")),
                                      "--tool-protocol", "native"])
    assert "use --tool-protocol text" in str(native.exception)
    assert not (tmp_path / "home" / "escrow.db").exists()  # nothing recorded


@pytest.fixture(scope="module")
def gemma_server(tmp_path_factory) -> str:
    require(available(), f"llama-server at {BINARY} with {MODEL} (scripts/setup.sh escrow_setup_llama_server)")
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with llama_server(log, extra=["--jinja", "--chat-template-file", str(TEMPLATES / "gemma.jinja")]) as url:
        yield url


def test_a_template_that_drops_past_answers_is_refused_before_the_run(tmp_path, monkeypatch):
    require(available(), f"llama-server at {BINARY} with {MODEL} (scripts/setup.sh escrow_setup_llama_server)")
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path / "home"))
    template = tmp_path / "drops.jinja"
    template.write_text(DROPS_PAST_ANSWERS)
    with llama_server(tmp_path / "server.log", context=512,
                      extra=["--jinja", "--chat-template-file", str(template)]) as url:
        result = CliRunner().invoke(app, run_args(EXAMPLE, url))
    assert isinstance(result.exception, TemplateNotPrefixPreserving), result.output
    assert "does not render an earlier answer's text" in result.exception.message
    assert not (tmp_path / "home" / "escrow.db").exists()


def test_each_prompt_is_the_last_one_and_its_sampled_ids_and_the_templates_text(gemma_server):
    """The delta on the real server, against the template's text written out:
    a quarantined answer's ids are dropped (the template's end of turn after
    an empty answer follows), a kept answer's ids are carried as sampled."""
    from orchestrator.adapters.model_client.token_exact import TokenExactClient
    from orchestrator.contract import Message, ModelRequest, Sampling

    def request(*messages: Message) -> ModelRequest:
        return ModelRequest(model="gemma-3-270m", messages=messages, max_tokens=4,
                            sampling=Sampling(temperature=0.0, seed=0))

    task, notice, result = (Message(role="user", content=text) for text in ("Say hi.", "Cut off.", "Go on."))
    with TokenExactClient(f"{gemma_server}/v1") as client, EngineTokens(gemma_server) as engine:
        first = client.call(request(task))
        assert first.status.value == "TRUNCATED" and first.completion_token_ids  # quarantined by the loop
        second = client.call(request(task, notice))
        answer = Message(role="assistant", content=second.payload.text)
        third = client.call(request(task, notice, answer, result))
        turn = "<end_of_turn>\n<start_of_turn>user\n{}<end_of_turn>\n<start_of_turn>model\n"
        assert second.prompt_token_ids == first.prompt_token_ids + engine.tokenize(turn.format("Cut off."))
        assert third.prompt_token_ids == (second.prompt_token_ids + (second.completion_token_ids or ())
                                          + engine.tokenize(turn.format("Go on.")))
        assert third.usage.prompt_tokens == len(third.prompt_token_ids)  # the engine read exactly these

        # After a kept answer the last rendering is the next one's start: one render a turn.
        renders: list[object] = []
        tokens = client.sequence.template.tokens
        render = tokens.apply_template
        tokens.apply_template = lambda m: renders.append(m) or render(m)
        again = Message(role="assistant", content=third.payload.text)
        fourth = client.call(request(task, notice, answer, result, again, Message(role="user", content="More.")))
        tokens.apply_template = render
        assert len(renders) == 1
        assert fourth.prompt_token_ids == (third.prompt_token_ids + (third.completion_token_ids or ())
                                           + engine.tokenize(turn.format("More.")))


def test_a_template_rendered_here_as_on_the_server_costs_one_round_trip_a_turn(gemma_server, tmp_path):
    """Once ``prepare`` has seen llama-server's template (``/props``) render
    probes here exactly as ``/apply-template`` does, a turn costs one
    ``/tokenize`` and the ids are those of the server's own rendering; a
    template this Jinja cannot render (llama.cpp's own ``strftime_now``)
    stays the server's."""
    from orchestrator.adapters.model_client.token_exact import TokenExactClient
    from orchestrator.contract import Message, ModelRequest, Sampling

    def run(url: str, *, prepared: bool) -> tuple[list[tuple[int, ...]], list[list[str]], TokenExactClient]:
        messages: tuple[Message, ...] = (Message(role="system", content="Be terse."),
                                         Message(role="user", content="Say <b>hi</b>.\n"))
        prompts, paths = [], []
        with TokenExactClient(f"{url}/v1") as client:
            if prepared:
                client.prepare(("user",))
            hits: list[str] = []
            client.tokens._http.event_hooks["request"].append(lambda r: hits.append(r.url.path))
            for turn in range(3):
                before = len(hits)
                answer = client.call(ModelRequest(model="gemma-3-270m", messages=messages, max_tokens=6,
                                                  sampling=Sampling(temperature=0.0, seed=0)))
                assert answer.payload is not None and answer.prompt_token_ids is not None, answer.error
                prompts.append(answer.prompt_token_ids)
                paths.append(hits[before:])
                messages = (*messages, Message(role="assistant", content=answer.payload.text),
                            Message(role="user", content=f"result {turn}\n\n"))
        return prompts, paths, client

    here, paths, client = run(gemma_server, prepared=True)
    assert client.server_renders_because is None and client.sequence.template.tokens.renders_here
    assert paths == [["/tokenize"]] * 3
    there, server_paths, _ = run(gemma_server, prepared=False)
    assert "/apply-template" in server_paths[1] and here == there  # the server's rendering, the same ids

    odd = tmp_path / "odd.jinja"
    odd.write_text("{{ strftime_now('%Y') }}" + (TEMPLATES / "gemma.jinja").read_text())
    with llama_server(tmp_path / "odd.log", context=512, extra=["--jinja", "--chat-template-file", str(odd)]) as url:
        _, odd_paths, odd_client = run(url, prepared=True)
    assert odd_client.server_renders_because and "strftime_now" in odd_client.server_renders_because
    assert all("/apply-template" in p for p in odd_paths[1:])


@pytest.mark.docker
@pytest.mark.slow
def test_a_token_exact_run_on_llama_server_is_clean_exact_and_rebuilds(gemma_server, tmp_path, repo_copy,
                                                                       sandbox_image, sandbox_runtime):
    home = tmp_path / "home"
    env = {**os.environ, "ESCROW_HOME": str(home)}
    # The grammar (--constrain tools) makes the small model end its answers
    # with a tool call, so answers are kept and their sampled ids carried on.
    args = [*run_args(repo_copy, gemma_server), "--max-turns", "2", "--max-tokens", "96", "--logprobs", "1",
            "--constrain", "tools", "--system-role", "user", "--context-window", "2048",
            "--runtime", sandbox_runtime, "--json"]
    result = CliRunner(env=env).invoke(app, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    run_id = json.loads(result.stdout)["run_id"]
    db = home / "escrow.db"

    checked, data = tokens_cli(db, run_id, "--json", "--model-url", gemma_server, "--rebuild")
    assert checked.exit_code == 0, checked.output
    calls = data["calls"]
    assert [c["token_class"] for c in calls] == ["CLEAN"] * len(calls) and len(calls) == 2
    assert all(c["problems"] == [] for c in calls)
    assert [r["position"] for r in data["rebuilt"]] == [None, None]

    with Store.open(f"sqlite:///{db}", readonly=True, create=False) as store:
        recorded = [(c.id, c.turn, c.request(), c.response.envelope())
                    for c in answered_calls(store.trajectory(run_id)) if c.response is not None]
    envelopes = [envelope for _, _, _, envelope in recorded]
    assert envelopes[0].status.value == "COMPLETED"
    first, second = envelopes
    assert first.prompt_token_ids and first.completion_token_ids
    # The second prompt carries the first answer's sampled ids as sampled (not a retry from its prompt).
    assert calls[1]["retry_of"] is None
    assert second.prompt_token_ids[:len(first.prompt_token_ids) + len(first.completion_token_ids)] == (
        first.prompt_token_ids + first.completion_token_ids)
    with EngineTokens(gemma_server) as engine:
        for envelope in envelopes:
            ids = envelope.completion_token_ids or ()
            # /completion returns the end-of-generation id it sampled; its text is not in the answer
            ended = envelope.finish_reason == "stop"
            assert engine.detokenize(ids[:-1] if ended else ids) == envelope.payload.text
            assert not ended or engine.detokenize(ids[-1:]) in ("<eos>", "<end_of_turn>")

        exported = CliRunner().invoke(app, ["export", run_id, "--format", "rollout", "--db", f"sqlite:///{db}"])
        assert exported.exit_code == 0, exported.output
        (row,) = [json.loads(line) for line in exported.stdout.splitlines() if line.startswith("{")]
        masked = [i for i, m in zip(row["input_ids"], row["loss_mask"], strict=True) if m]
        kept = [e for e in envelopes if e.status.value == "COMPLETED"]
        assert masked == [i for e in kept for i in e.completion_token_ids or ()]

        # Drifts injected into the recording. One in the ids the template
        # added (the delta): the rebuild names it, the drift check cannot
        # (the prompt still extends the last prompt and answer). One in the
        # carried sampled ids: both name it.
        carried = len(first.prompt_token_ids) + len(first.completion_token_ids)
        assert len(first.completion_token_ids) > 4
        for at, drift_class in ((carried + 3, TokenClass.CLEAN), (len(first.prompt_token_ids) + 1, TokenClass.FORK)):
            ids = list(second.prompt_token_ids)
            ids[at] = ids[at] + 1
            tampered = [recorded[0], (*recorded[1][:3], second.model_copy(update={"prompt_token_ids": tuple(ids)}))]
            rebuilt = rebuild_prompts(engine, tampered)
            assert rebuilt[0].position is None and rebuilt[1].position == at
            assert rebuilt[1].rebuilt_text and rebuilt[1].recorded_text != rebuilt[1].rebuilt_text
            report = check_envelopes(run_id, [(c, t, e) for c, t, _, e in tampered])
            assert [c.token_class for c in report.calls] == [TokenClass.CLEAN, drift_class]


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "calculator"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns(".benchmarks", "__pycache__", ".pytest_cache"))
    return target


def test_a_token_exact_specs_requests_only_grow_and_older_specs_keep_their_bytes():
    from orchestrator.context import TiktokenCounter
    from orchestrator.contract import Message
    from orchestrator.perimeter import acl_of
    from orchestrator.runspec import build_agent
    from policies import default_policy
    from tests.replay.recording import MemoryTools, memory_spec

    policy = default_policy()
    grows = {}
    for token_exact in (False, True):
        spec = memory_spec(policy, "m", token_exact=token_exact)
        assert ("token_exact" in spec.model_dump(mode="json")) is token_exact  # a plain spec's bytes are as before
        agent = build_agent(spec, counter=TiktokenCounter("cl100k_base"), model=None,  # type: ignore[arg-type]
                            tools=MemoryTools({}, policy), acl=acl_of(policy), journal=None)  # type: ignore[arg-type]
        first = agent.context.build(0, turns_left=3).messages
        agent.context.append(Message(role="assistant", content="an answer"))
        agent.context.append(Message(role="user", content="a tool's result"))
        second = agent.context.build(1, turns_left=2).messages
        grows[token_exact] = second[:len(first)] == first
    # Without --token-exact the volatile tail ([turns left: ...]) is replaced every turn.
    assert grows == {False: False, True: True}
