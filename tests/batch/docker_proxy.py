"""A real unix-socket proxy in front of dockerd that refuses its first N
connections: dockerd unavailable for one sandbox start, then back."""

from __future__ import annotations

import socket
import threading
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
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy one direction; at its end pass the half-close on (SHUT_WR), as
    Docker's attached exec streams need: stdin ends, the output keeps coming."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
