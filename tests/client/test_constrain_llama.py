"""The tool-call grammar on the real engines with the real Gemma 3 270M: the
shared llama-cpp-python server and llama.cpp's own llama-server (started here
on a free port). Under the grammar every answer's calls parse and the text is
in the grammar's language; on the same prompt and seed without it, the model
writes a call that does not parse (the model allows it here: asked to copy a
call whose arguments are not JSON, it does so, or worse)."""

from __future__ import annotations

import json

import pytest

from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.adapters.model_client.engines import constraint_for
from orchestrator.contract import Constraint, Message, ModelRequest, Sampling
from orchestrator.envelope import Envelope, Payload, Status
from orchestrator.grammar import tool_grammar
from orchestrator.tool_protocols import TextProtocol
from orchestrator.toolset import tool_specs
from tests.conftest import require
from tests.gbnf import accepts
from tests.llama_server import BINARY, GEMMA_CHAT, MODEL, available, llama_server

pytestmark = pytest.mark.llama

GRAMMAR = tool_grammar(tool_specs())
# Asked to copy a call whose arguments are not JSON: unconstrained, a small
# model copies it (or rambles); constrained, it can only write JSON.
BAD_EXAMPLE = 'Repeat exactly this line and nothing else:\n<tool name="list_files">{path: .}</tool>'
TASK = "Make the failing test in test_calc.py pass by fixing calc.py. Start by looking at the files."


def ask(prompt: str, constraint: Constraint | None, max_tokens: int = 96, system: bool = True) -> ModelRequest:
    told = "You are a careful software engineer.\n\n" + TextProtocol().system_addendum(tool_specs())
    messages = (Message(role="user", content=told),) * system + (Message(role="user", content=prompt),)
    return ModelRequest(model="gemma-3-270m", messages=messages, max_tokens=max_tokens, stop=TextProtocol.stop,
                        stream=False, deadline_s=900, sampling=Sampling(temperature=0.0, seed=0),
                        constraint=constraint)


def parses(envelope: Envelope) -> bool:
    """A completed answer whose calls are each one JSON object (the perimeter's parse layer)."""
    calls = TextProtocol().calls(Payload(text=envelope.payload.text), turn=0)
    if envelope.status is not Status.COMPLETED or not calls:
        return False
    try:
        return all(isinstance(json.loads(c.arguments), dict) for c in calls)
    except ValueError:
        return False


def check_engine(base_url: str, engine: str) -> None:
    constraint = constraint_for(engine, None, "text", GRAMMAR.text)
    with ModelClient(base_url + "/v1") as client:
        # The free text before the call is bounded well under the 96 tokens,
        # so each answer reaches its call and completes.
        for request in (ask(TASK, constraint), ask(BAD_EXAMPLE, constraint, system=False)):
            answer = client.call(request)
            assert answer.status is Status.COMPLETED, (answer.status, answer.error, answer.payload.text)
            # The server strips the stop sequence, which the grammar ends with.
            assert accepts(GRAMMAR.text, answer.payload.text + "</tool>"), answer.payload.text
            assert parses(answer), answer.payload.text
        # Without the tools' description (whose example call the model would
        # echo), on the same prompt and seed.
        free = client.call(ask(BAD_EXAMPLE, None, system=False))
        assert not parses(free), free.payload.text


def test_llama_cpp_python_honours_the_grammar(llama_url):
    check_engine(llama_url, "llama-cpp-python")


@pytest.fixture(scope="module")
def llama_cpp(tmp_path_factory) -> str:
    require(available(), f"llama-server at {BINARY} with {MODEL} (scripts/setup.sh escrow_setup_llama_server)")
    # Gemma's own chat template: without it llama-server falls back to ChatML,
    # which the model echoes as free text until its output limit.
    with llama_server(tmp_path_factory.mktemp("llama-server") / "server.log", extra=GEMMA_CHAT) as url:
        yield url


def test_llama_server_honours_the_grammar(llama_cpp):
    check_engine(llama_cpp, "llama.cpp")


def test_auto_leaves_the_slow_llama_cpp_python_unconstrained_and_says_why(llama_url, tmp_path):
    """llama-cpp-python honours a grammar at several times the cost of a
    token (engines.SLOW_GRAMMAR_ENGINES): ``auto`` leaves it off there and
    says why; ``tools`` still asks for it."""
    from orchestrator.composition.launch.compose import ModelProbe, resolve_constraint
    from orchestrator.settings import Settings
    from policies import default_policy

    policy = default_policy()
    specs = tool_specs(policy.tools.allowed)
    for wanted, constrained in (("auto", False), ("tools", True)):
        settings = Settings(home=tmp_path, model_url=f"{llama_url}/v1", model="gemma-3-270m",
                            tokenizer="cl100k_base", tool_protocol="text", constrain=wanted)
        probe = ModelProbe(settings)
        try:
            assert probe.engine.engine == "llama-cpp-python"
            choice = resolve_constraint(settings, policy, specs, probe)
        finally:
            probe.close()
        assert (choice.constraint is not None) is constrained, choice.why
        if not constrained:
            assert "whole vocabulary" in choice.why
