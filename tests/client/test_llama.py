"""The client against the real llama.cpp server (llama-cpp-python, Gemma 3
270M on CPU). The model is weak; these tests prove the protocol, not answers."""

from __future__ import annotations

import json
import threading
import time

import pytest
from pydantic import BaseModel, ConfigDict

from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.envelope import Status
from orchestrator.escrow import QuarantinedPayloadError, release_from_escrow

pytestmark = pytest.mark.llama

MODEL = "gemma-3-270m"
DEFINITE = {Status.COMPLETED, Status.TRUNCATED}


class Person(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    age: int


SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer", "maximum": 150}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def llama(llama_url):
    with ModelClient(llama_url + "/v1") as client:
        yield client


def ask(text: str, **fields) -> ModelRequest:
    return ModelRequest(
        model=MODEL, messages=(Message(role="user", content=text),),
        max_tokens=fields.pop("max_tokens", 12), deadline_s=fields.pop("deadline_s", 120),
        sampling=fields.pop("sampling", Sampling(temperature=0.0, seed=0)), **fields,
    )


def test_streamed_call_has_definite_status_and_marked_usage(llama):
    env = llama.call(ask("Name a colour."))
    assert env.status in DEFINITE, env.error
    assert env.http_status == 200 and env.model == MODEL and env.payload.text
    assert env.timings.ttft_s is not None and env.timings.decode_s is not None
    server_sent_usage = '"usage"' in env.raw_response
    expected = "server" if server_sent_usage else "estimated"
    assert env.usage.completion_source == expected and env.usage.prompt_source == expected
    assert env.usage.prompt_tokens > 0 and env.usage.completion_tokens > 0


def test_non_streamed_call_has_definite_status_and_server_usage(llama):
    env = llama.call(ask("Name a colour.", stream=False))
    assert env.status in DEFINITE, env.error
    assert env.usage.prompt_source == "server" and env.usage.completion_source == "server"
    assert 0 < env.usage.completion_tokens <= 12


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_small_max_tokens_is_truncated(llama, stream):
    env = llama.call(ask("Write a long story about the sea.", max_tokens=3, stream=stream))
    assert env.status is Status.TRUNCATED and env.finish_reason == "length"
    with pytest.raises(QuarantinedPayloadError):
        release_from_escrow(env)
    if not stream:
        assert env.usage.completion_tokens == 3


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_json_schema_constrained_output_parses_with_the_schema(llama, stream):
    # llama-cpp-python takes the schema inside a json_object response_format.
    fmt = {"type": "json_object", "schema": SCHEMA}
    env = llama.call(ask("Give a person's name and age as JSON.", max_tokens=60, stream=stream, response_format=fmt))
    assert env.status is Status.COMPLETED, (env.error, env.payload.text)
    person = Person.model_validate(json.loads(release_from_escrow(env).text))
    assert len(person.name) <= 16


def test_json_schema_response_format_is_refused_by_this_server(llama):
    env = llama.call(ask("x", response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}))
    assert env.status is Status.FAULTED and env.http_status == 500
    assert "json_object" in env.error.message and len(env.attempts) == 1


def test_logprobs_when_asked(llama):
    env = llama.call(ask("Say hi.", max_tokens=4, sampling=Sampling(temperature=0.0, logprobs=True, top_logprobs=1)))
    assert env.status in DEFINITE
    assert env.logprobs and all("logprob" in entry for entry in env.logprobs)


class FirstWords:
    """A stream observer that calls ``then`` once, when the first piece of the
    answer arrives: the generation is under way, and the test acts right there
    instead of after a fixed time (a 2,000-token answer can be whole in under a
    second on a fast machine, and a timer then fires after the finish)."""

    def __init__(self, then) -> None:
        self.then, self.arrived = then, threading.Event()

    def on_attempt(self, number: int) -> None:
        pass

    def on_delta(self, kind: str, text: str) -> None:
        if not self.arrived.is_set():
            self.arrived.set()
            self.then()


LONG = "Count from one to five hundred in words."


def test_cancel_cuts_a_real_generation(llama_url):
    cancel = threading.Event()
    first = FirstWords(cancel.set)
    with ModelClient(llama_url + "/v1", observer=first) as client:
        env = client.call(ask(LONG, max_tokens=2000), cancel=cancel)
    assert first.arrived.is_set() and env.status is Status.CANCELED
    assert env.finish_reason is None  # cut mid-generation: the server never sent its finish


def test_deadline_cuts_a_real_generation(llama_url):
    # T_max passes on the client's clock once the first words are in: the
    # clock jumps past it there, so the cut lands mid-generation on any machine.
    # The caller holds a cancel event, as the agent always does: the watchdog
    # then reads the clock every few milliseconds.
    deadline_s, ahead = 60.0, 0.0

    def past_the_deadline() -> None:
        nonlocal ahead
        ahead = deadline_s

    first = FirstWords(past_the_deadline)
    with ModelClient(llama_url + "/v1", clock=lambda: time.monotonic() + ahead, observer=first) as client:
        env = client.call(ask(LONG, max_tokens=2000, deadline_s=deadline_s), cancel=threading.Event())
    assert first.arrived.is_set()
    assert env.status is Status.TRANSPORT_FAILURE and env.error.kind == "deadline"
    assert env.timings.total_s >= deadline_s and len(env.attempts) == 1  # not before the deadline, not retried
    assert env.finish_reason is None
