"""Retries over real HTTP: only TRANSPORT_FAILURE, bounded, with backoff that
honours Retry-After, every attempt recorded; and the circuit breaker."""

from __future__ import annotations

import time

from orchestrator.adapters.fault_server import Fault, Reply
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.adapters.model_client.retry import RetryPolicy
from orchestrator.envelope import Status


def test_503_503_then_success_records_three_attempts_with_backoff(srv, req):
    srv.script([Fault.http(503), Fault.http(503), Reply(text="third time")])
    waits: list[float] = []
    policy = RetryPolicy(max_attempts=3, base_s=0.1, cap_s=1.0)
    with ModelClient(srv.base_url, retry=policy, sleep=waits.append, rand=lambda: 0.5) as c:
        env = c.call(req())
    assert env.status is Status.COMPLETED and env.payload.text == "third time"
    assert [(a.number, a.status, a.http_status) for a in env.attempts] == [
        (1, Status.TRANSPORT_FAILURE, 503), (2, Status.TRANSPORT_FAILURE, 503), (3, Status.COMPLETED, 200)]
    # full jitter with rand=0.5: half of base*2**(n-1)
    assert [a.backoff_s for a in env.attempts] == [0.05, 0.1, 0.0] and waits == [0.05, 0.1]
    assert env.attempts[0].error.kind == "unavailable"
    assert len(srv.requests) == 3
    bodies = [r.body for r in srv.requests]
    assert bodies[0] == bodies[1] == bodies[2]  # a retry resends the identical request


def test_real_backoff_is_slept(srv, req):
    srv.script([Fault.http(502), Reply(text="ok")])
    with ModelClient(srv.base_url, retry=RetryPolicy(base_s=0.2, cap_s=0.2), rand=lambda: 1.0) as c:
        env = c.call(req())
    assert env.status is Status.COMPLETED
    gap = srv.requests[1].received_at - srv.requests[0].received_at
    assert env.attempts[0].backoff_s == 0.2 and gap >= 0.2


def test_429_retry_after_is_honoured(srv, req):
    srv.script([Fault.rate_limited(retry_after=1), Reply(text="after the wait")])
    with ModelClient(srv.base_url, retry=RetryPolicy(base_s=0.01)) as c:
        env = c.call(req())
    assert env.status is Status.COMPLETED
    first = env.attempts[0]
    assert (first.status, first.http_status, first.error.kind) == (Status.TRANSPORT_FAILURE, 429, "rate_limited")
    assert first.backoff_s >= 1.0  # jitter alone would be <= 0.01 s
    assert srv.requests[1].received_at - srv.requests[0].received_at >= 1.0


def test_retry_after_longer_than_allowed_ends_retries(srv, req):
    srv.script([Fault.rate_limited(retry_after=120), Reply(text="not reached")])
    with ModelClient(srv.base_url, retry=RetryPolicy(max_retry_after_s=5)) as c:
        env = c.call(req())
    assert env.status is Status.TRANSPORT_FAILURE and len(srv.requests) == 1
    assert "Retry-After 120s exceeds 5s" in env.error.message


def test_hangup_is_retried_then_succeeds(srv, client, req):
    srv.script([Fault.hangup(), Reply(text="fine now")])
    env = client.call(req(stream=False))
    assert env.status is Status.COMPLETED
    assert env.attempts[0].error.kind == "read_error" and env.attempts[0].http_status is None


def test_circuit_opens_after_consecutive_failures_and_half_opens(srv, req):
    now = [0.0]
    policy = RetryPolicy(max_attempts=1, breaker_threshold=2, breaker_reset_s=30)
    srv.script([Fault.http(503), Fault.http(503), Reply(text="recovered")])
    with ModelClient(srv.base_url, retry=policy, clock=lambda: now[0] + time.monotonic()) as c:
        assert c.call(req()).status is Status.TRANSPORT_FAILURE
        assert c.call(req()).status is Status.TRANSPORT_FAILURE
        assert c.breaker.state == "open"
        fast = c.call(req())
        assert fast.status is Status.TRANSPORT_FAILURE and fast.error.kind == "circuit_open"
        assert len(srv.requests) == 2  # fail fast: nothing sent while open
        now[0] += 31
        assert c.breaker.state == "half-open"
        healed = c.call(req())
        assert healed.status is Status.COMPLETED and c.breaker.state == "closed"
    assert len(srv.requests) == 3


def test_non_transport_statuses_do_not_count_against_the_circuit(srv, req):
    policy = RetryPolicy(max_attempts=1, breaker_threshold=1)
    srv.script([Fault.truncated(), Fault.http(500), Fault.context_overflow(), Reply(text="ok")])
    with ModelClient(srv.base_url, retry=policy) as c:
        statuses = [c.call(req()).status for _ in range(4)]
    assert statuses == [Status.TRUNCATED, Status.FAULTED, Status.FAULTED, Status.COMPLETED]
    assert len(srv.requests) == 4
