"""The sandbox-start deadline, apart from the per-command and whole-task ones.

A start that has not finished within ``deadline_s`` raises ``SandboxStartTimeout``
(an infrastructure failure: the batch retries it and reports it apart). The
start itself cannot be interrupted inside the Docker client, so it goes on in
its own thread; should it still succeed, that sandbox is closed at once, so a
late start leaves no container behind. Should it fail (the Docker client gave
up waiting on a create that dockerd still carries out), the run is marked
abandoned: that thread then watches for a container of the run landing and
removes it, for ``linger_s`` after the start returned, and every later sweep
of this process (``remove_orphans``) treats one as dead, however late.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sandbox import Sandbox
from sandbox.errors import SandboxError
from sandbox.orphans import abandon_run, remove_abandoned

LINGER_S = 600.0
"""How long an abandoned start's thread watches for its container after the start returned."""

Starter = Callable[..., Sandbox]


class SandboxStartTimeout(SandboxError):
    """The sandbox did not start within the batch's ``--start-timeout``."""


class BoundedStart:
    """A drop-in for ``Sandbox.start`` that gives up after ``deadline_s``."""

    def __init__(self, deadline_s: float, start: Starter = Sandbox.start, linger_s: float = LINGER_S) -> None:
        self.deadline_s, self.start, self.linger_s = deadline_s, start, linger_s
        self.late: list[threading.Thread] = []  # starts abandoned at the deadline, still finishing
        self.watching: list[threading.Event] = []  # set one to end that failed start's watch

    def __call__(self, *args: Any, **kwargs: Any) -> Sandbox:
        done = threading.Event()
        lock = threading.Lock()
        box: dict[str, Any] = {}

        def attempt() -> None:
            try:
                sandbox = self.start(*args, **kwargs)
            except BaseException as exc:  # handed to the caller below, or dropped if it gave up
                with lock:
                    box["error"] = exc
                    late = bool(box.get("abandoned"))
                if late:
                    done.set()
                    self._watch(args[0] if args else kwargs.get("client"), kwargs.get("run_id"))
            else:
                with lock:
                    if box.get("abandoned"):
                        sandbox.close()  # nobody will use it: no leaked container
                    else:
                        box["sandbox"] = sandbox
            finally:
                done.set()

        worker = threading.Thread(target=attempt, name="sandbox-start", daemon=True)
        worker.start()
        done.wait(self.deadline_s)
        with lock:
            if "sandbox" in box:
                return box["sandbox"]
            if "error" in box:
                raise box["error"]
            box["abandoned"] = True
            if isinstance(kwargs.get("run_id"), str):
                abandon_run(kwargs["run_id"])
        self.late.append(worker)
        raise SandboxStartTimeout(f"the sandbox did not start within {self.deadline_s:g}s (--start-timeout)",
                                  run_id=kwargs.get("run_id"), deadline_s=self.deadline_s)

    def _watch(self, client: Any, run_id: Any) -> None:
        """The abandoned start failed: a create dockerd still carries out may
        land after it. Remove any container of the run now, then as it lands."""
        if client is None or not isinstance(run_id, str):
            return
        stop = threading.Event()
        self.watching.append(stop)
        deadline = time.monotonic() + self.linger_s
        while True:
            try:
                remove_abandoned(client, run_id)
            except Exception:  # dockerd away or slow: try again at the next look
                pass
            if stop.wait(1.0) or time.monotonic() >= deadline:
                return

    def join_late(self, timeout_s: float | None = None) -> None:
        """Wait for abandoned starts to finish (and close what they made)."""
        for worker in self.late:
            worker.join(timeout_s)
