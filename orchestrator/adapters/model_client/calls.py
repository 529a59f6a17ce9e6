"""A model call's attempts, the one mechanism both clients use: each
attempt in T_max (``run_attempt``'s watchdog), TRANSPORT_FAILURE retried
with full-jitter backoff (``retry_decision``), the circuit breaker told
once per call, and every attempt recorded. What an attempt reads is the
caller's: the chat client's streamed or whole completion, the token
client's whole body in its engine's shape."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from orchestrator.adapters.model_client.attempt import AttemptOutcome
from orchestrator.adapters.model_client.normalize import Cause, is_retried, status_of
from orchestrator.adapters.model_client.retry import CircuitBreaker, RetryPolicy, retry_decision
from orchestrator.envelope import Attempt, ErrorDetail, Status


class Retrier:
    """``sleep`` and ``rand`` replace the backoff wait and the jitter source
    (for tests); ``clock`` is the monotonic clock T_max is read on."""

    def __init__(self, retry: RetryPolicy, breaker: CircuitBreaker, *, sleep: Callable[[float], None] | None,
                 rand: Callable[[], float], clock: Callable[[], float]) -> None:
        self.retry, self.breaker = retry, breaker
        self._sleep, self._rand, self._clock = sleep, rand, clock

    def blocked(self, cancel: threading.Event | None) -> tuple[Cause, str] | None:
        """Why no request may be sent now (a cancel, an open circuit), or None."""
        if cancel is not None and cancel.is_set():
            return Cause.EXTERNAL_CANCEL, "cancelled before the request was sent"
        if not self.breaker.allow():
            return (Cause.CIRCUIT_OPEN,
                    f"circuit open after {self.breaker.failures} consecutive transport failures; no request sent")
        return None

    def run(self, attempt: Callable[[], AttemptOutcome], *, deadline_at: float, cancel: threading.Event | None,
            on_attempt: Callable[[int], None] | None = None) -> tuple[AttemptOutcome, list[Attempt]]:
        """Attempts until one is not retried; the last outcome and them all."""
        attempts: list[Attempt] = []
        while True:
            number = len(attempts) + 1
            if on_attempt is not None:
                on_attempt(number)
            out = attempt()
            status = status_of(out.cause)
            decision = retry_decision(
                self.retry,
                attempts_made=number,
                retryable=is_retried(out.cause),
                retry_after_s=out.retry_after_s,
                remaining_s=deadline_at - self._clock(),
                rand=self._rand,
            )
            error = None if status is Status.COMPLETED else ErrorDetail(kind=out.cause.value, message=out.message)
            attempts.append(Attempt(
                number=number, status=status, http_status=out.http_status, error=error,
                duration_s=out.ended - out.started, backoff_s=decision.delay_s if decision.retry else 0.0,
            ))
            if not decision.retry:
                if out.cause is not Cause.CIRCUIT_OPEN and status is not Status.CANCELED:
                    self.breaker.record(status is Status.TRANSPORT_FAILURE)
                if is_retried(out.cause):
                    out.message += f" (gave up after {number} attempt(s): {decision.reason})"
                return out, attempts
            if self._wait(decision.delay_s, cancel):
                out.cause, out.message = Cause.EXTERNAL_CANCEL, "cancelled by the caller during retry backoff"
                return out, attempts

    def _wait(self, delay: float, cancel: threading.Event | None) -> bool:
        """Back off; True if the caller cancelled meanwhile."""
        if self._sleep is not None:
            self._sleep(delay)
        elif cancel is not None:
            return cancel.wait(delay)
        else:
            time.sleep(delay)
        return cancel is not None and cancel.is_set()
