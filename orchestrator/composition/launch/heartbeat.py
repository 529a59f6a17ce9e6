"""A run's lease, renewed while its process lives (``store.read.liveness`` reads
it): every run, plain, batch or Ray, holds one from its first row, so a run
whose process was killed reads ``crashed`` once the lease lapses."""

from __future__ import annotations

import os
import socket
import threading

from orchestrator.errors import EscrowError
from store import Store
from store.read import liveness


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Heartbeat:
    """Renews the run's lease (taken with the run, ``claim``) while this
    process lives; the lease lapses if it dies."""

    def __init__(self, store: Store, lease_s: float) -> None:
        self.store, self.lease_s = store, lease_s
        self.run_id: str | None = None
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def claim(self, attempt_id: str | None = None) -> liveness.LeaseClaim:
        return liveness.LeaseClaim(owner=owner_id(), lease_s=self.lease_s, attempt_id=attempt_id)

    def started(self, run_id: str) -> None:
        self.run_id = run_id
        self.thread = threading.Thread(target=self._beat, args=(run_id,), name=f"lease-{run_id[:8]}", daemon=True)
        self.thread.start()

    def _beat(self, run_id: str) -> None:
        while not self.stop.wait(self.lease_s / 3):
            try:
                liveness.renew_lease(self.store, run_id, self.lease_s)
            except EscrowError:
                pass  # the store is away; the lease lapses and the run reads as crashed, which is then true

    def close(self) -> None:
        """Stop renewing; the lease of a run that ended is dropped, that of
        one left running (its end could not be recorded) is left to lapse."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
        if self.run_id is not None:
            try:
                liveness.release_lease(self.store, self.run_id)
            except EscrowError:
                pass
