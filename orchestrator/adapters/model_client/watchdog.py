"""Enforces T_max and the cancel event on a blocking HTTP call.

httpx timeouts bound each socket operation, not a whole call, and a blocked
``recv`` cannot be interrupted by closing the socket from another thread on
Linux. So a small thread watches the deadline and the cancel event and, when
either fires, *shuts down* the attempt's socket: the blocked read returns at
once in the calling thread and the server sees the connection go (which is
what makes an inference engine stop decoding and free the KV cache).

The socket is learned through httpcore's documented ``trace`` extension, as
soon as the TCP connection exists, so even a server that stalls before
sending headers can be cut off.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from orchestrator.adapters.model_client.normalize import Cause

_POLL_S = 0.005  # threading.Event cannot be waited on jointly with another, so poll the caller's


class Watchdog:
    def __init__(
        self,
        deadline_at: float,
        cancel: threading.Event | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.deadline_at = deadline_at
        self.cancel = cancel
        self.clock = clock
        self.fired: Cause | None = None
        self.fired_at: float | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._watch, name="escrow-watchdog", daemon=True)

    def __enter__(self) -> "Watchdog":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore trace hook: remember each socket this attempt opens."""
        if event.endswith(".complete") and ("connect_tcp" in event or "connect_unix_socket" in event):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                self.adopt(sock)

    def adopt(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            fired = self.fired is not None
        if fired:
            _shutdown(sock)

    def fire(self, cause: Cause) -> None:
        """Cut the connection now (also used by the reader when the monitor trips)."""
        with self._lock:
            if self.fired is None:
                self.fired, self.fired_at = cause, self.clock()
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)

    def _watch(self) -> None:
        cancel = self.cancel
        while True:
            remaining = self.deadline_at - self.clock()
            if cancel is not None and cancel.is_set():
                self.fire(Cause.EXTERNAL_CANCEL)
                return
            if remaining <= 0:
                self.fire(Cause.DEADLINE)
                return
            wait = remaining if cancel is None else min(remaining, _POLL_S)
            if self._done.wait(wait):
                return


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed or never connected: nothing left to cut
