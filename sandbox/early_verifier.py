"""The verifier's container of a run's next submit, started while the agent
works: a fresh container filled with the starting copy in which, for the
first submit, the trusted pre-pass collects the required tests
(``ToolBox._collect_required``). Its work depends on nothing of the model's,
so it runs in a thread (from the run's start, and again after each failed
submit) and ``submit`` pays only the copy and the tests.

The container is the same as the one a submit starts itself (same spec,
same owner labels: the orphan sweep finds it when the run is killed). It is
handed out once (``take``); ``close`` stops the pre-pass and removes
whatever is not handed out, also a container that lands after the close.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from orchestrator.evidence import Required
from sandbox.container import Sandbox

# How long ``close`` waits for the thread; a container it lands later is
# removed by the thread itself (it finds the stop set).
CLOSE_WAIT_S = 30.0
_POLL_S = 0.05

Prepared = tuple[Sandbox, Required | None]


class EarlyVerifier:
    """``prepare(stop)`` run in a thread: it returns the verifier's container
    and the pre-pass's required tests, closing its container itself if it
    raises; ``stop`` is set when the run no longer wants the result."""

    def __init__(self, prepare: Callable[[threading.Event], Prepared]) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._ready: Prepared | None = None
        self.failure: BaseException | None = None  # why the early pre-pass gave nothing
        self._thread = threading.Thread(target=self._run, args=(prepare,), name="escrow-early-verifier", daemon=True)
        self._thread.start()

    def _run(self, prepare: Callable[[threading.Event], Prepared]) -> None:
        try:
            made = prepare(self._stop)
        except BaseException as exc:  # kept for the submit, which then does the pre-pass itself
            self.failure = exc
            return
        with self._lock:
            if not self._stop.is_set():
                self._ready = made
                return
        made[0].close()

    def take(self, cancel: threading.Event | None = None) -> Prepared | None:
        """Wait for the pre-pass, then hand out its container and list, once.
        None when it failed, was canceled (``cancel``) or was already taken:
        then the submit starts its own container, as without it."""
        while self._thread.is_alive():
            if cancel is not None and cancel.is_set():
                self._stop.set()
            self._thread.join(_POLL_S)
        with self._lock:
            self._stop.set()
            made, self._ready = self._ready, None
        return made

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def close(self) -> None:
        """Stop the pre-pass (its command is killed) and remove the container
        not handed out (idempotent)."""
        self._stop.set()
        self._thread.join(CLOSE_WAIT_S)
        with self._lock:
            made, self._ready = self._ready, None
        if made is not None:
            made[0].close()
