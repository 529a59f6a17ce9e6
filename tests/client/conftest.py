"""Fixtures for the model-client tests: one real fault server on loopback for
the session, reset before each test, and helpers to build requests."""

from __future__ import annotations

import pytest

from orchestrator.adapters.fault_server import FaultServer
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.adapters.model_client.retry import RetryPolicy
from orchestrator.contract import Message, ModelRequest


def words(text: str) -> int:
    return len(text.split())


@pytest.fixture
def srv(fault_server: FaultServer) -> FaultServer:
    return fault_server


@pytest.fixture
def fast_retry() -> RetryPolicy:
    return RetryPolicy(max_attempts=3, base_s=0.02, cap_s=0.1)


@pytest.fixture
def client(srv: FaultServer, fast_retry: RetryPolicy):
    # A word-count estimator keeps these tests independent of tiktoken's load time.
    with ModelClient(srv.base_url, retry=fast_retry, token_estimator=words) as c:
        yield c


def make_request(text: str = "write a test", *, stream: bool = True, **fields) -> ModelRequest:
    return ModelRequest(
        model="fault-model",
        messages=(Message(role="user", content=text),),
        max_tokens=fields.pop("max_tokens", 64),
        deadline_s=fields.pop("deadline_s", 10.0),
        stream=stream,
        **fields,
    )


@pytest.fixture
def req():
    """Build a ModelRequest: ``req("text", stream=False, deadline_s=1)``."""
    return make_request
