"""Model replicas: each run sticks to one replica for its whole trajectory (the
server's prefix cache stays warm), runs go to the least-loaded replica, and a
replica that fails is drained so later runs go elsewhere."""

from __future__ import annotations

import threading


class NoReplica(Exception):
    """Every replica has been drained."""


class ReplicaPool:
    def __init__(self, urls: list[str]) -> None:
        if not urls:
            raise ValueError("at least one model URL is needed")
        self.urls = list(dict.fromkeys(urls))
        self.load = {url: 0 for url in self.urls}
        self.drained: set[str] = set()
        self.lock = threading.Lock()

    def acquire(self) -> str:
        """The least-loaded live replica (ties: the order given), its load counted."""
        with self.lock:
            live = [u for u in self.urls if u not in self.drained]
            if not live:
                raise NoReplica("every model replica was drained")
            url = min(live, key=lambda u: (self.load[u], self.urls.index(u)))
            self.load[url] += 1
            return url

    def release(self, url: str) -> None:
        with self.lock:
            self.load[url] -= 1

    def live(self) -> int:
        with self.lock:
            return len(self.urls) - len(self.drained)

    def drain(self, url: str) -> None:
        with self.lock:
            self.drained.add(url)
