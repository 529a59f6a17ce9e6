"""The circuit breaker counts calls, not attempts: a call's own retries never
open it, K consecutive failed calls do, and then every client sharing it fails
fast without sending a byte. Against the real fault server."""

from __future__ import annotations

import threading

from orchestrator.adapters.fault_server import Fault, Reply
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.adapters.model_client.retry import CircuitBreaker, RetryPolicy
from orchestrator.envelope import Status

POLICY = RetryPolicy(max_attempts=3, base_s=0.0, cap_s=0.0, breaker_threshold=2, breaker_reset_s=30)


def _client(srv, **kw) -> ModelClient:
    return ModelClient(srv.base_url, retry=POLICY, sleep=lambda s: None, token_estimator=lambda s: 0, **kw)


def test_one_calls_retries_do_not_open_the_circuit_but_k_failed_calls_do(srv, req):
    srv.script([Fault.http(503)] * 6 + [Reply(text="never asked")])
    with _client(srv) as client:
        first = client.call(req())
        # Counting attempts would open it at the 2nd attempt and cut the 3rd.
        assert [a.error.kind for a in first.attempts] == ["unavailable"] * 3
        assert client.breaker.state == "closed"
        second = client.call(req())
        assert second.status is Status.TRANSPORT_FAILURE and len(second.attempts) == 3
        assert client.breaker.state == "open"
        fast = client.call(req())
    assert fast.status is Status.TRANSPORT_FAILURE and fast.error.kind == "circuit_open"
    assert len(fast.attempts) == 1
    assert len(srv.requests) == 6  # the third call sent nothing


def test_a_breaker_shared_by_clients_fails_fast_for_all_of_them(srv, req):
    now = [0.0]
    shared = CircuitBreaker(threshold=2, reset_s=30, clock=lambda: now[0])
    srv.script([Fault.http(503)] * 6 + [Reply(text="recovered")])
    with _client(srv, breaker=shared) as a, _client(srv, breaker=shared) as b:
        assert a.call(req()).status is Status.TRANSPORT_FAILURE
        assert b.call(req()).status is Status.TRANSPORT_FAILURE
        assert b.call(req()).error.kind == "circuit_open"
        assert a.call(req()).error.kind == "circuit_open"
        assert len(srv.requests) == 6
        now[0] += 31  # half-open: one trial goes through and closes it
        assert a.call(req()).status is Status.COMPLETED
    assert shared.state == "closed" and shared.failures == 0 and len(srv.requests) == 7


def test_a_call_canceled_during_backoff_does_not_count(srv, req):
    cancel = threading.Event()
    srv.script([Fault.http(503)] * 3)
    with _client(srv) as client:
        client._retrier._sleep = lambda s: cancel.set()  # the caller cancels during the first backoff
        envelope = client.call(req(), cancel=cancel)
    assert envelope.status is Status.CANCELED
    assert client.breaker.failures == 0
