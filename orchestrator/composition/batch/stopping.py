"""Ctrl-C on a batch: it stops cleanly.

A ``BatchStop`` is shared by the executor and its workers. Stopping sets the
cancel event of every run in flight (each ends CANCELED, its sandbox removed
by its own clean-up) and keeps workers from starting another attempt. Such an
attempt is recorded ``interrupted``: not a model verdict and not an
infrastructure failure, so ``--resume`` reruns its task and counts it once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class BatchStop:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancels: set[threading.Event] = set()
        self._stopped = threading.Event()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def stop(self) -> None:
        """Cancel every run in flight; no attempt starts after this."""
        with self._lock:
            self._stopped.set()
            for cancel in self._cancels:
                cancel.set()

    @contextmanager
    def watching(self, cancel: threading.Event) -> Iterator[None]:
        """While inside, ``stop`` sets ``cancel`` (at once if already stopped)."""
        with self._lock:
            self._cancels.add(cancel)
            if self._stopped.is_set():
                cancel.set()
        try:
            yield
        finally:
            with self._lock:
                self._cancels.discard(cancel)
