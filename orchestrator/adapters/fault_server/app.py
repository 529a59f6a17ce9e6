"""The fault server's ASGI application.

``/v1/chat/completions`` and ``/v1/completions`` (vLLM's shape, for a prompt
of token ids) are handled at the raw ASGI level, because faults need
what a framework hides: hanging up without a response (which needs uvicorn's
transport) and noticing the client hang up while a stream is paced. Other
routes (``/v1/models``, ``/health``, vLLM's ``/tokenize``) are a plain
Starlette app.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from orchestrator.adapters.fault_server import chat_tokens, scenario_bytes, sglang
from orchestrator.adapters.fault_server.observed import Disconnect, RecordedRequest, StreamRecord
from orchestrator.adapters.fault_server.scenario import HttpError, Oversized, RawResponse, Reply, Scenario

SERVER_NAME = b"escrow-fault-server"


class ScriptExhausted(Exception):
    pass


KEY_PREFIX = "/k/"
COMPLETIONS = ("/v1/chat/completions", "/v1/completions", sglang.PATH)
# The whole (not streamed) answer of each path in its engine's shape.
WHOLE = {"/v1/completions": scenario_bytes.completion_body, sglang.PATH: sglang.generate_body}


def split_key(path: str) -> tuple[str | None, str]:
    """``/k/KEY/v1/...`` -> (KEY, ``/v1/...``): concurrent runs, each with its own script."""
    if not path.startswith(KEY_PREFIX):
        return None, path
    key, _, rest = path[len(KEY_PREFIX):].partition("/")
    return key, "/" + rest


class FaultState:
    """Script queues and observations, shared between the server thread and callers.
    ``queue`` serves plain paths; ``keyed[KEY]`` serves paths under ``/k/KEY/``;
    ``restart[KEY]``: that key's whole script, played again from its start by
    each request that opens a conversation (a new run of the same task)."""

    def __init__(self, default: Scenario | None) -> None:
        self.lock = threading.Lock()
        self.queue: deque[Scenario] = deque()
        self.keyed: dict[str, deque[Scenario]] = {}
        self.restart: dict[str, tuple[Scenario, ...]] = {}
        self.cycle = False
        self.default = default
        self.requests: list[RecordedRequest] = []
        self.streams: list[StreamRecord] = []
        self.disconnects: list[Disconnect] = []
        self.hits: list[str] = []  # the path of every HTTP request, every route, in order
        self.changed = threading.Condition(self.lock)
        self.released: set[str] = set()

    def next_scenario(self, key: str | None = None, *, opens: bool = False) -> Scenario:
        with self.lock:
            if key is not None and opens and key in self.restart:
                self.keyed[key] = deque(self.restart[key])
            queue = self.queue if key is None else self.keyed.get(key, deque())
            if queue:
                item = queue.popleft()
                if self.cycle:
                    queue.append(item)
                return item
            if self.default is not None:
                return self.default
        where = "" if key is None else f" for key {key!r}"
        raise ScriptExhausted(f"script exhausted{where} after {len(self.requests)} requests")

    def record(self, item: Any) -> None:
        with self.changed:
            targets: dict[type, list[Any]] = {
                RecordedRequest: self.requests, StreamRecord: self.streams, Disconnect: self.disconnects
            }
            targets[type(item)].append(item)
            self.changed.notify_all()


def opens_conversation(body: dict[str, Any]) -> bool:
    """A request with messages but no assistant or tool turn yet: the first
    call of a run (its retries included)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return False
    return not any(isinstance(m, dict) and m.get("role") in ("assistant", "tool") for m in messages)


class FaultApp:
    """``endpoints`` maps extra paths to the JSON they answer (to GET and
    POST alike), so a test can pose as an engine (vLLM ``/version``,
    llama.cpp ``/props``, its ``/detokenize``...); one given for a built-in
    path (``/v1/models``, SGLang's ``/generate``) replaces what it serves."""

    def __init__(self, state: FaultState, model: str, endpoints: dict[str, Any] | None = None,
                 chat_template: chat_tokens.ChatTemplate = "chatml") -> None:
        self.state = state
        self.model = model
        self.chat_template = chat_template
        self.fixed = frozenset(endpoints or ())
        self.prefilled_until = 0.0  # the simulated engine's clock: when the prefills queued so far are done
        extra = [Route(path, _fixed(value), methods=["GET", "POST"]) for path, value in (endpoints or {}).items()]
        self.routes = Starlette(routes=[*extra, Route("/v1/models", self._models), Route("/health", self._health),
                                        Route("/tokenize", self._tokenize, methods=["POST"])])

    async def _models(self, request: Request) -> JSONResponse:
        return JSONResponse(
            {"object": "list", "data": [{"id": self.model, "object": "model", "owned_by": "escrow-fault-server"}]}
        )

    async def _health(self, request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def _tokenize(self, request: Request) -> JSONResponse:
        body = await request.json()
        return JSONResponse(chat_tokens.tokenize(body if isinstance(body, dict) else {}, self.chat_template))

    async def __call__(self, scope, receive, send) -> None:
        key, original = None, scope.get("path", "")
        if scope["type"] == "http":
            with self.state.lock:
                self.state.hits.append(original)
            key, path = split_key(scope["path"])
            scope = {**scope, "path": path, "raw_path": path.encode()}
        if scope["type"] != "http" or scope["path"] not in COMPLETIONS or scope["path"] in self.fixed:
            await self.routes(scope, receive, send)
            return
        raw = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        with self.state.lock:
            index = len(self.state.requests)
        self.state.record(RecordedRequest(index, scope["method"], original, headers, bytes(raw), time.monotonic()))
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        try:
            scenario = self.state.next_scenario(key, opens=opens_conversation(body))
        except ScriptExhausted as exc:
            await _respond(
                send,
                500,
                b"application/json",
                json.dumps({"error": {"message": str(exc), "type": "fault_server"}}).encode(),
            )
            return
        await self._play(scenario, body, index, send, receive, path=scope["path"])

    async def _stall(self, scenario: Reply | HttpError) -> None:
        name = scenario.released_by if isinstance(scenario, Reply) else None
        if name is None:
            await anyio.sleep(scenario.delay_s)
            return
        # Polled: release() comes from the test's thread, outside this event loop.
        until = anyio.current_time() + scenario.delay_s
        while name not in self.state.released and anyio.current_time() < until:
            await anyio.sleep(min(0.2, max(0.0, until - anyio.current_time())))

    async def _prefill(self, body: dict[str, Any], ids_per_s: float) -> None:
        """Wait until the engine, reading every prompt in flight at ``ids_per_s``
        in all, has read this one (one event loop: no lock)."""
        prompt = body.get("prompt")
        ids = len(prompt) if isinstance(prompt, list) else 0
        now = anyio.current_time()
        self.prefilled_until = max(now, self.prefilled_until) + ids / ids_per_s
        await anyio.sleep(self.prefilled_until - now)

    async def _play(self, scenario: Scenario, body: dict[str, Any], index: int, send, receive, *,
                    path: str = COMPLETIONS[0]) -> None:
        if scenario.kind == "hangup":
            _hang_up(send)
            return
        if isinstance(scenario, (Reply, HttpError)) and scenario.delay_s:
            await self._stall(scenario)
        if isinstance(scenario, Reply) and scenario.prefill_ids_per_s and path == "/v1/completions":
            await self._prefill(body, scenario.prefill_ids_per_s)
        if isinstance(scenario, HttpError):
            await self._http_error(scenario, send)
        elif isinstance(scenario, RawResponse):
            await self._raw(scenario, send)
        elif isinstance(scenario, Oversized):
            await self._oversized(scenario, body, send)
        elif body.get("stream") and path not in WHOLE:
            await self._stream(scenario, body, index, send, receive)
        else:
            data, tokens = WHOLE.get(path, scenario_bytes.whole_body)(scenario, body, index)
            if scenario.tokens_per_s:
                await anyio.sleep(tokens / scenario.tokens_per_s)
            await _respond(send, 200, b"application/json", data, scenario.headers)

    async def _http_error(self, item: HttpError, send) -> None:
        extra = dict(item.headers)
        if item.retry_after is not None:
            extra["retry-after"] = str(item.retry_after)
        data = item.body if item.body is not None else json.dumps(
            {"error": {"message": item.message, "type": item.error_type, "code": item.status}}
        )
        await _respond(send, item.status, b"application/json", data.encode("utf-8"), extra)

    async def _raw(self, item: RawResponse, send) -> None:
        if item.piece_bytes is None:
            await _respond(send, item.status, item.content_type.encode(), item.body)
            return
        await _start(send, item.status, item.content_type.encode())
        for start in range(0, len(item.body), item.piece_bytes):
            await send(
                {"type": "http.response.body", "body": item.body[start : start + item.piece_bytes], "more_body": True}
            )
            await anyio.sleep(item.pause_s)  # yields even at 0, so each piece is its own write
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _oversized(self, item: Oversized, body: dict[str, Any], send) -> None:
        streamed = bool(body.get("stream"))
        await _start(send, 200, b"text/event-stream" if streamed else b"application/json")
        piece = "x" * item.piece_bytes
        if streamed:
            frame = scenario_bytes.sse(
                json.dumps({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
            )
            head, tail = (
                b"",
                scenario_bytes.sse(json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
                + scenario_bytes.sse("[DONE]"),
            )
        else:
            frame = piece.encode()
            head = b'{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"'
            tail = b'"},"finish_reason":"stop"}]}'
        await send({"type": "http.response.body", "body": head, "more_body": True})
        for _ in range(-(-item.size_bytes // item.piece_bytes)):
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    async def _stream(self, reply: Reply, body: dict[str, Any], index: int, send, receive) -> None:
        steps = scenario_bytes.stream_plan(reply, body, index)
        record = StreamRecord(index, sum(1 for kind, _ in steps if kind == "chunk"))
        self.state.record(record)
        await _start(send, 200, b"text/event-stream", {**reply.headers, "cache-control": "no-cache"})
        pause = 1.0 / reply.tokens_per_s if reply.tokens_per_s else 0.0

        async def play(scope: anyio.CancelScope) -> None:
            for kind, value in steps:
                if kind == "chunk":
                    if pause:
                        await anyio.sleep(pause)
                    await send({"type": "http.response.body", "body": value, "more_body": True})
                    record.sent_at.append(time.monotonic())
                elif kind == "send":
                    await send({"type": "http.response.body", "body": value, "more_body": True})
                elif kind == "stall":
                    await anyio.sleep(value)
                elif kind == "disconnect":
                    record.hung_up_by_server = True
                    _hang_up(send)
                    scope.cancel()
                    return
            record.all_sent = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            scope.cancel()

        async def watch(scope: anyio.CancelScope) -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if not record.all_sent and not record.hung_up_by_server:
                record.disconnected_at = time.monotonic()
                self.state.record(Disconnect(index, record.chunks_sent, record.planned_chunks, record.disconnected_at))
            scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(play, group.cancel_scope)
            group.start_soon(watch, group.cancel_scope)


def _fixed(value: Any):
    async def answer(request: Request) -> JSONResponse:
        return JSONResponse(value)
    return answer


async def _start(send, status: int, content_type: bytes, extra: dict[str, str] | None = None) -> None:
    headers = [(b"content-type", content_type), (b"server", SERVER_NAME)]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def _respond(send, status: int, content_type: bytes, data: bytes, extra: dict[str, str] | None = None) -> None:
    await _start(send, status, content_type, {**(extra or {}), "content-length": str(len(data))})
    await send({"type": "http.response.body", "body": data, "more_body": False})


def _hang_up(send) -> None:
    """Drop the TCP connection with nothing more sent. ASGI has no message for
    this, so reach uvicorn's transport through its bound ``send`` (the server
    runs uvicorn's h11 protocol, pinned)."""
    cycle = getattr(send, "__self__", None)
    transport = getattr(cycle, "transport", None)
    if cycle is None or transport is None:
        raise RuntimeError("hang-up needs uvicorn's h11 protocol (send is not bound to a request cycle)")
    transport.close()
    cycle.disconnected = True
