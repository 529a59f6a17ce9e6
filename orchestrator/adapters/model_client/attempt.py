"""One HTTP attempt of a model call: send, read (SSE or whole body), classify.

Everything that can go wrong ends as a ``Cause`` in the returned
``AttemptOutcome``; nothing is raised. Reading stops the moment the outcome is
known: a monitor trip, the deadline or a cancel closes the connection at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from pydantic import ValidationError

from orchestrator.adapters.model_client.accumulate import ResponseAccumulator
from orchestrator.adapters.model_client.engines import error_message, error_text_message
from orchestrator.adapters.model_client.normalize import Cause, error_object_cause, finish_cause, http_cause
from orchestrator.adapters.model_client.retry import parse_retry_after
from orchestrator.adapters.model_client.sse import SSEError, SSEEvent, SSEParser
from orchestrator.adapters.model_client.watchdog import Watchdog
from orchestrator.adapters.model_client.wire import WireCompletion, WireErrorBody

RAW_CAP = 64 * 1024
FRAMING_ALLOWANCE = 64 * 1024  # JSON/SSE framing around M_max payload bytes
ERROR_BODY_CAP = 64 * 1024
_CUT_SHORT = (Cause.READ_ERROR, Cause.CONNECT_ERROR, Cause.DEADLINE)


@dataclass
class AttemptOutcome:
    cause: Cause
    message: str
    acc: ResponseAccumulator
    http_status: int | None = None
    retry_after_s: float | None = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytearray = field(default_factory=bytearray)
    raw_total: int = 0
    body: str | None = None
    started: float = 0.0
    first_payload_at: float | None = None
    ended: float = 0.0


class _Finished(Exception):
    """Internal: the outcome is decided; stop reading."""

    def __init__(self, cause: Cause, message: str) -> None:
        super().__init__(message)
        self.cause, self.message = cause, message


def run_attempt(
    http: httpx.Client,
    url: str,
    body: bytes,
    headers: dict[str, str],
    acc: ResponseAccumulator,
    *,
    deadline_at: float,
    cancel: threading.Event | None,
    body_cap: int,
    clock: Callable[[], float] = time.monotonic,
    whole: bool = False,
) -> AttemptOutcome:
    """``whole``: a 2xx answer is any JSON body, kept in ``out.body`` for the
    caller to read in its engine's shape (the cause says only that it was
    read: FINISH_STOP); else it is a chat completion, streamed or not."""
    out = AttemptOutcome(Cause.READ_ERROR, "", acc, started=clock())
    remaining = max(0.001, deadline_at - out.started)
    timeout = httpx.Timeout(remaining, connect=remaining)
    with Watchdog(deadline_at, cancel, clock) as dog:
        request = http.build_request("POST", url, content=body, headers=headers, timeout=timeout,
                                     extensions={"trace": dog.trace})
        response: httpx.Response | None = None
        try:
            response = http.send(request, stream=True)
            out.http_status = response.status_code
            out.headers = {k.lower(): v for k, v in response.headers.items()}
            if response.status_code >= 300:
                _read_error_response(response, out)
            elif whole:
                _read_whole(response, out, body_cap, clock)
            elif "text/event-stream" in out.headers.get("content-type", ""):
                _read_sse(response, out, body_cap, clock, dog)
            else:
                _read_body(response, out, body_cap, clock)
        except _Finished as done:
            out.cause, out.message = done.cause, done.message
        except httpx.ConnectError as exc:
            out.cause, out.message = Cause.CONNECT_ERROR, f"cannot connect to {url}: {exc}"
        except httpx.TimeoutException as exc:
            out.cause, out.message = Cause.DEADLINE, f"timed out ({type(exc).__name__}) with T_max reached"
        except httpx.HTTPError as exc:  # dropped, reset or half-written connections
            out.cause, out.message = Cause.READ_ERROR, f"{type(exc).__name__}: {exc or 'connection lost'}"
        finally:
            # A read cut short by the watchdog surfaces as a transport error; name the real reason.
            if dog.fired in (Cause.DEADLINE, Cause.EXTERNAL_CANCEL) and out.cause in _CUT_SHORT:
                out.cause = dog.fired
                out.message = ("T_max expired" if dog.fired is Cause.DEADLINE else "cancelled by the caller") + (
                    f" after {acc.chunks} chunks" if acc.chunks else ""
                )
            if response is not None:
                response.close()
    out.ended = clock()
    return out


def _capture(out: AttemptOutcome, chunk: bytes) -> None:
    out.raw_total += len(chunk)
    room = RAW_CAP - len(out.raw)
    if room > 0:
        out.raw += chunk[:room]


def _read_error_response(response: httpx.Response, out: AttemptOutcome) -> None:
    for chunk in response.iter_bytes():
        _capture(out, chunk)
        if out.raw_total > ERROR_BODY_CAP:
            break
    text = bytes(out.raw).decode("utf-8", "replace")
    try:
        message = WireErrorBody.model_validate_json(out.raw).text() or text
    except ValidationError:
        message = text
    out.retry_after_s = parse_retry_after(out.headers.get("retry-after"))
    cause = http_cause(response.status_code, message)
    raise _Finished(cause, f"HTTP {response.status_code}: {message.strip()[:500]}")


def _read_sse(response, out: AttemptOutcome, body_cap: int, clock, dog: Watchdog) -> None:
    parser = SSEParser(max_line_bytes=body_cap)
    acc = out.acc
    try:
        for chunk in response.iter_bytes():
            _capture(out, chunk)
            for event in parser.feed(chunk):
                _on_event(event, out, clock, dog)
        for event in parser.close():
            _on_event(event, out, clock, dog)
    except SSEError as exc:
        cause = Cause.NON_UTF8 if exc.kind == "non_utf8" else Cause.PAYLOAD_TOO_LARGE
        if cause is Cause.PAYLOAD_TOO_LARGE:
            dog.fire(cause)
        raise _Finished(cause, str(exc)) from exc
    _finish(acc, "stream ended")


def _on_event(event: SSEEvent, out: AttemptOutcome, clock, dog: Watchdog) -> None:
    acc, data = out.acc, event.data
    if event.event in ("error", "bare"):
        _in_band_error(event)
    if data.strip() == "[DONE]":
        _finish(acc, "[DONE] arrived")
    try:
        chunk = WireCompletion.model_validate_json(data)
    except ValidationError as exc:
        raise _Finished(
            Cause.MALFORMED_PROTOCOL, f"chunk {acc.chunks + 1} is not a completion chunk: {_first_error(exc)}"
        ) from exc
    _error_object(chunk, "stream")
    if acc.add(chunk) and out.first_payload_at is None:
        out.first_payload_at = clock()
    if acc.trip is not None:
        dog.fire(acc.trip.cause)  # cut the connection before anything else: the server must stop decoding
        raise _Finished(acc.trip.cause, acc.trip.detail)


def _in_band_error(event: SSEEvent) -> None:
    """An ``error`` event or bare JSON inside a 200 stream: the server's own
    report of a failure, never a dropped connection, so never retried."""
    message = error_text_message(event.data)
    if event.event == "bare" and message is None:
        raise _Finished(Cause.MALFORMED_PROTOCOL, f"JSON outside SSE framing: {event.data[:200]!r}")
    if message is None:
        message = event.data.strip() or "(no message)"
    what = "bare JSON error" if event.event == "bare" else "error event"
    raise _Finished(error_object_cause(message), f"{what} in stream: {message[:500]}")


def _error_object(body: WireCompletion, where: str) -> None:
    if body.error is None and body.object != "error":
        return
    message = error_message(body.model_dump(mode="json")) or "(no message)"
    raise _Finished(error_object_cause(message), f"error object in {where}: {message[:500]}")


def _finish(acc: ResponseAccumulator, how: str) -> None:
    cause = finish_cause(acc.finish_reason, "".join(acc.refusal) or None)
    if cause is None:
        if how == "stream ended":
            raise _Finished(Cause.READ_ERROR, f"stream ended after {acc.chunks} chunks without a finish reason")
        raise _Finished(Cause.MALFORMED_PROTOCOL, f"{how} without a finish reason")
    raise _Finished(cause, f"finish_reason {acc.finish_reason!r}" + (" with a refusal" if acc.refusal else ""))


def _read_whole(response: httpx.Response, out: AttemptOutcome, body_cap: int, clock) -> None:
    out.body = _body_text(response, out, body_cap, clock)
    raise _Finished(Cause.FINISH_STOP, "the whole body was read")


def _read_body(response: httpx.Response, out: AttemptOutcome, body_cap: int, clock) -> None:
    text = _body_text(response, out, body_cap, clock)
    try:
        whole = WireCompletion.model_validate_json(text)
    except ValidationError as exc:
        raise _Finished(Cause.MALFORMED_PROTOCOL, f"response body is not a completion: {_first_error(exc)}") from exc
    acc = out.acc
    _error_object(whole, "response")
    if not whole.choices:
        raise _Finished(Cause.MALFORMED_PROTOCOL, "response has no choices")
    acc.add(whole)
    if acc.trip is not None:
        raise _Finished(acc.trip.cause, acc.trip.detail)
    _finish(acc, "response body")


def _body_text(response: httpx.Response, out: AttemptOutcome, body_cap: int, clock) -> str:
    body = bytearray()
    for chunk in response.iter_bytes():
        if out.first_payload_at is None:
            out.first_payload_at = clock()
        _capture(out, chunk)
        body += chunk
        if len(body) > body_cap:
            raise _Finished(Cause.PAYLOAD_TOO_LARGE, f"response body passed {body_cap} bytes (M_max plus framing)")
    try:
        return bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Finished(Cause.NON_UTF8, f"response body is not UTF-8 at byte {exc.start}") from exc


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "body"
    return f"{where}: {err.get('msg', 'invalid')}"
