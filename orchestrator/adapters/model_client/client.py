"""ModelClient: one ``ModelRequest`` in, one ``Envelope`` out, whatever happens.

The call speaks ``/v1/chat/completions`` (streamed or not), enforces T_max over
the whole call (retries and their backoff included) and M_max over staged
bytes, and retries only TRANSPORT_FAILURE, with full-jitter backoff, Retry-After
as a floor, and a circuit breaker. Every attempt is recorded in the envelope.
No exception escapes ``call``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import httpx

from orchestrator.adapters.model_client.accumulate import ResponseAccumulator
from orchestrator.adapters.model_client.attempt import FRAMING_ALLOWANCE, RAW_CAP, AttemptOutcome, run_attempt
from orchestrator.adapters.model_client.call_usage import TokenEstimator, default_estimator, resolve_usage
from orchestrator.adapters.model_client.calls import Retrier
from orchestrator.adapters.model_client.monitor import StreamMonitor
from orchestrator.adapters.model_client.normalize import Cause, status_of
from orchestrator.adapters.model_client.provenance import EngineInfo, probe
from orchestrator.adapters.model_client.retry import CircuitBreaker, RetryPolicy
from orchestrator.canonical import canonical_bytes
from orchestrator.contract import ModelRequest
from orchestrator.envelope import Attempt, Envelope, ErrorDetail, Status, Timings, Usage
from orchestrator.logprobs import logprobs_mode, read_logprobs, token_ids
from orchestrator.observer import StreamObserver


class ModelClient:
    """Client for an OpenAI-compatible server; ``base_url`` ends in ``/v1``.

    ``sleep`` and ``rand`` replace the backoff wait and the jitter source (for
    tests); ``clock`` is the monotonic clock used for T_max and timings;
    ``breaker`` is a circuit breaker shared with other clients of the server.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        retry: RetryPolicy = RetryPolicy(),
        transport: httpx.BaseTransport | None = None,
        token_estimator: TokenEstimator | None = None,
        sleep: Callable[[float], None] | None = None,
        rand: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
        breaker: CircuitBreaker | None = None,
        observer: StreamObserver | None = None,
    ) -> None:
        self.observer = observer
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.retry = retry
        self.breaker = breaker or CircuitBreaker(retry.breaker_threshold, retry.breaker_reset_s, clock)
        self._api_key = api_key
        self._estimate = token_estimator or default_estimator()
        self._clock = clock
        self._retrier = Retrier(retry, self.breaker, sleep=sleep, rand=rand, clock=clock)
        # No keep-alive by default: each attempt opens its own connection, so the
        # watchdog always holds the socket and can cut a call that stalls even
        # before the response headers. A model call lasts seconds; a connect is µs.
        limits = httpx.Limits(max_keepalive_connections=0)
        self._http = httpx.Client(transport=transport, limits=limits, follow_redirects=False)
        self._engine: EngineInfo | None = None

    def __enter__(self) -> "ModelClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def engine_info(self) -> EngineInfo:
        """The engine behind ``base_url``, probed on first use and kept; from
        then on every envelope names it (``Envelope.engine``)."""
        if self._engine is None:
            self._engine = probe(self.base_url, self._http)
        return self._engine

    def call(self, request: ModelRequest, *, cancel: threading.Event | None = None) -> Envelope:
        start = self._clock()
        try:
            return self._call(request, cancel, start)
        except Exception as exc:  # the contract: every failure is an Envelope, even our own bugs
            return Envelope(
                status=Status.FAULTED,
                error=ErrorDetail(kind=Cause.INTERNAL_ERROR.value, message=f"{type(exc).__name__}: {exc}"),
                timings=Timings(total_s=self._clock() - start),
                request_sha256=_sha(request),
            )

    def _call(self, request: ModelRequest, cancel: threading.Event | None, start: float) -> Envelope:
        deadline_at = start + request.deadline_s
        body = canonical_bytes(request.wire_body())
        headers = {
            "content-type": "application/json",
            "accept": "text/event-stream" if request.stream else "application/json",
        }
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        out, attempts = self._retrier.run(
            lambda: self._attempt(request, body, headers, deadline_at, cancel),
            deadline_at=deadline_at, cancel=cancel,
            on_attempt=None if self.observer is None else self.observer.on_attempt)
        return self._envelope(request, out, attempts, start)

    def _attempt(self, request, body, headers, deadline_at, cancel) -> AttemptOutcome:
        monitor = StreamMonitor(request.max_payload_bytes, json_content=_wants_json(request))
        acc = ResponseAccumulator(monitor, keep_logprobs=request.sampling.logprobs, observer=self.observer)
        now = self._clock()
        blocked = self._retrier.blocked(cancel)
        if blocked is not None:
            return AttemptOutcome(*blocked, acc, started=now, ended=now)
        return run_attempt(
            self._http, self.url, body, headers, acc,
            deadline_at=deadline_at, cancel=cancel,
            body_cap=request.max_payload_bytes + FRAMING_ALLOWANCE, clock=self._clock,
        )

    def _reported(self, setting: str) -> str | None:
        """A setting the engine reported, once it has been probed."""
        value = self._engine.settings.get(setting) if self._engine is not None else None
        return value if isinstance(value, str) else None

    def _envelope(self, request: ModelRequest, out: AttemptOutcome, attempts: list[Attempt], start: float) -> Envelope:
        acc = out.acc
        status = status_of(out.cause)
        payload = acc.payload()
        answered = out.http_status is not None and 200 <= out.http_status < 300
        usage = resolve_usage(acc, request, payload, self._estimate) if answered else Usage()
        first = out.first_payload_at
        streamed = "text/event-stream" in out.headers.get("content-type", "")
        timings = Timings(
            ttft_s=None if first is None else first - out.started,
            decode_s=None if first is None or not streamed else out.ended - first,
            total_s=self._clock() - start,
        )
        raw = None
        if out.raw_total:
            raw = bytes(out.raw).decode("utf-8", "replace")
            if out.raw_total > RAW_CAP:
                raw += f"\n[... {out.raw_total - RAW_CAP} more bytes not kept]"
        return Envelope(
            status=status,
            payload=payload,
            finish_reason=acc.finish_reason,
            http_status=out.http_status,
            usage=usage,
            timings=timings,
            model=acc.model,
            system_fingerprint=acc.system_fingerprint,
            engine=self._engine.label if self._engine is not None else (
                out.headers.get("x-inference-engine") or out.headers.get("server")),
            logprobs=acc.logprobs if request.sampling.logprobs else None,
            top_logprobs=request.sampling.top_logprobs if request.sampling.logprobs else None,
            logprobs_mode=logprobs_mode(request.sampling.extra, self._reported("logprobs_mode"))
            if request.sampling.logprobs else None,
            prompt_token_ids=None if acc.prompt_token_ids is None else tuple(acc.prompt_token_ids),
            completion_token_ids=_completion_ids(acc),
            error=None if status is Status.COMPLETED else ErrorDetail(kind=out.cause.value, message=out.message),
            attempts=tuple(attempts),
            request_sha256=request.sha256(),
            payload_bytes=acc.monitor.staged_bytes,
            raw_response=raw,
        )


def _completion_ids(acc: ResponseAccumulator) -> tuple[int, ...] | None:
    """The choice's ``token_ids`` if sent, else the ids on the logprob entries;
    none when the choice's were unreadable (the two may not be the same tokens)."""
    if acc.bad_token_ids:
        return None
    ids = (
        acc.token_ids if acc.token_ids is not None else token_ids(read_logprobs(acc.logprobs)) if acc.logprobs else None
    )
    return None if ids is None else tuple(ids)


def _wants_json(request: ModelRequest) -> bool:
    kind = (request.response_format or {}).get("type")
    return kind in ("json_object", "json_schema")


def _sha(request: ModelRequest) -> str | None:
    try:
        return request.sha256()
    except Exception:
        return None
