"""FaultServer: the fault-injection model server on loopback, in a thread.

    with FaultServer() as srv:
        srv.script([Reply(tool_calls=[...]), Fault.http(503, retry_after=1), Reply(text="done")])
        client = ModelClient(srv.base_url)
        ...
        srv.requests      # every request body received, in order
        srv.disconnects   # every response the client hung up on early
        srv.hits          # the path of every HTTP request (/tokenize, /v1/models...), in order
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

import uvicorn

from orchestrator.adapters.fault_server.app import FaultApp, FaultState
from orchestrator.adapters.fault_server.chat_tokens import ChatTemplate
from orchestrator.adapters.fault_server.observed import Disconnect, RecordedRequest, StreamRecord
from orchestrator.adapters.fault_server.scenario import Scenario, Script
from orchestrator.errors import EscrowError


class FaultServerError(EscrowError):
    """The fault server could not start or stop."""


class FaultServer:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model: str = "fault-model",
        default: Scenario | None = None,
        startup_timeout_s: float = 10.0,
        endpoints: dict[str, Any] | None = None,
        chat_template: ChatTemplate = "chatml",
    ) -> None:
        self.host = host
        self._port = port
        self.model = model
        self.startup_timeout_s = startup_timeout_s
        self.endpoints = endpoints
        self.chat_template: ChatTemplate = chat_template
        self._state = FaultState(default)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    # lifecycle
    def start(self) -> "FaultServer":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self._port))
        except OSError as exc:
            sock.close()
            raise FaultServerError(
                f"cannot listen on {self.host}:{self._port}: {exc.strerror}", port=self._port
            ) from exc
        self._sock = sock
        self._port = sock.getsockname()[1]
        config = uvicorn.Config(
            FaultApp(self._state, self.model, self.endpoints, self.chat_template), http="h11", lifespan="off",
            log_level="warning",
            access_log=False, server_header=False, date_header=False, proxy_headers=False,
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="fault-server", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise FaultServerError(f"fault server did not start on {self.base_url}")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._server is not None:
            # Scripted stalls may be mid-sleep; a test server owes them no grace.
            self._server.should_exit = self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._sock is not None:
            self._sock.close()
        self._server = self._thread = self._sock = None

    def __enter__(self) -> "FaultServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Block until the server stops (Ctrl-C in the CLI)."""
        if self._thread is not None:
            while self._thread.is_alive():
                self._thread.join(timeout=0.5)

    # script
    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        """What ModelClient wants: ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self.host}:{self._port}/v1"

    def script(self, steps: Iterable[Scenario], *, cycle: bool = False) -> None:
        """Replace the queue: one step answers one request, in order."""
        with self._state.lock:
            self._state.queue.clear()
            self._state.queue.extend(steps)
            self._state.cycle = cycle

    def script_for(self, key: str, steps: Iterable[Scenario], *, restart: bool = False) -> None:
        """Give requests under ``/k/KEY/v1`` their own queue (``keyed_url(KEY)``).
        ``restart``: a request that opens a conversation (no assistant turn
        yet) plays the script again from its start, so each new run of a task
        (a retry, a resumed batch) gets the whole script; otherwise runs under
        one key share the queue, each taking up where the last one stopped."""
        steps = tuple(steps)
        with self._state.lock:
            self._state.keyed[key] = deque(steps)
            if restart:
                self._state.restart[key] = steps
            else:
                self._state.restart.pop(key, None)

    def keyed_url(self, key: str) -> str:
        return f"http://{self.host}:{self._port}/k/{key}/v1"

    def load(self, script: Script) -> None:
        self.script(script.steps, cycle=script.cycle)

    def reset(self) -> None:
        """Empty the script and forget every observation (one server, many tests)."""
        with self._state.lock:
            self._state.queue.clear()
            self._state.keyed.clear()
            self._state.restart.clear()
            self._state.cycle = False
            self._state.requests.clear()
            self._state.streams.clear()
            self._state.disconnects.clear()
            self._state.released.clear()
            self._state.hits.clear()

    def release(self, name: str) -> None:
        """End every stall held under ``released_by=name``, now and later."""
        with self._state.lock:
            self._state.released.add(name)

    def push(self, step: Scenario) -> None:
        with self._state.lock:
            self._state.queue.append(step)

    @property
    def pending(self) -> int:
        with self._state.lock:
            return len(self._state.queue)

    # observations
    @property
    def requests(self) -> list[RecordedRequest]:
        with self._state.lock:
            return list(self._state.requests)

    @property
    def hits(self) -> list[str]:
        """The path of every HTTP request received on any route (key
        included), in order: the round trips a client made."""
        with self._state.lock:
            return list(self._state.hits)

    @property
    def streams(self) -> list[StreamRecord]:
        with self._state.lock:
            return list(self._state.streams)

    @property
    def disconnects(self) -> list[Disconnect]:
        with self._state.lock:
            return list(self._state.disconnects)

    def wait_disconnects(self, count: int = 1, timeout_s: float = 2.0) -> list[Disconnect]:
        """Disconnects seen so far, waiting up to ``timeout_s`` for ``count`` of them
        (the server notices a hang-up asynchronously)."""
        with self._state.changed:
            self._state.changed.wait_for(lambda: len(self._state.disconnects) >= count, timeout=timeout_s)
            return list(self._state.disconnects)
