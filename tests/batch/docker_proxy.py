"""A real unix-socket proxy in front of dockerd that refuses its first N
connections: dockerd unavailable for one sandbox start, then back."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path


class FlakyDockerProxy:
    def __init__(self, path: Path, *, refuse: int, upstream: str = "/var/run/docker.sock") -> None:
        self.path, self.refuse, self.upstream = path, refuse, upstream
        self.refused = 0
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(64)
        self.thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def __enter__(self) -> "FlakyDockerProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.refused < self.refuse:
                self.refused += 1
                client.close()  # the daemon "is not there"
                continue
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.upstream)
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        _pipe(client, upstream)


class StallingDockerProxy(FlakyDockerProxy):
    """Holds the first ``stall`` container-create requests (or others whose
    request line ends in ``holds``) until ``release`` is set (or ``safety_s``
    passes): dockerd that accepts a sandbox start and does not get to it, as
    under a start storm."""

    def __init__(self, path: Path, *, stall: int, safety_s: float = 120.0, drop: bool = False,
                 holds: bytes = b"/containers/create") -> None:
        super().__init__(path, refuse=0)
        self.stall, self.safety_s, self.drop, self.holds = stall, safety_s, drop, holds
        self.stalled = self.creates = self.requested = 0  # requested: request data seen, of any kind
        self.release = threading.Event()
        self.lock = threading.Lock()

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        super().__exit__(*exc)

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        _pipe(client, upstream, before=self._hold_create)

    def _hold_create(self, data: bytes) -> None:
        method_path = data.split(b"\r\n", 1)[0].rsplit(b" ", 1)[0].split(b"?", 1)[0]
        with self.lock:
            self.requested += 1
        if not method_path.endswith(self.holds):
            return
        with self.lock:
            self.creates += 1
            hold = self.stalled < self.stall
            self.stalled += hold
        if hold:
            self.release.wait(self.safety_s)
            if self.drop:  # its caller is gone: dockerd never sees the request
                raise OSError("create dropped by the proxy")


def _pipe(src: socket.socket, dst: socket.socket, before: Callable[[bytes], None] = lambda data: None) -> None:
    """Copy one direction; at its end pass the half-close on (SHUT_WR), as
    Docker's attached exec streams need: stdin ends, the output keeps coming."""
    try:
        while data := src.recv(65536):
            before(data)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
