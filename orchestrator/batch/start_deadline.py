"""The sandbox-start deadline, apart from the per-command and whole-task ones.

A start that has not finished within ``deadline_s`` raises ``SandboxStartTimeout``
(an infrastructure failure: the batch retries it and reports it apart). The
start itself cannot be interrupted inside the Docker client, so it goes on in
its own thread; should it still succeed, that sandbox is closed at once, so a
late start leaves no container behind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sandbox import Sandbox
from sandbox.errors import SandboxError

Starter = Callable[..., Sandbox]


class SandboxStartTimeout(SandboxError):
    """The sandbox did not start within the batch's ``--start-timeout``."""


class BoundedStart:
    """A drop-in for ``Sandbox.start`` that gives up after ``deadline_s``."""

    def __init__(self, deadline_s: float, start: Starter = Sandbox.start) -> None:
        self.deadline_s, self.start = deadline_s, start
        self.late: list[threading.Thread] = []  # starts abandoned at the deadline, still finishing

    def __call__(self, *args: Any, **kwargs: Any) -> Sandbox:
        done = threading.Event()
        lock = threading.Lock()
        box: dict[str, Any] = {}

        def attempt() -> None:
            try:
                sandbox = self.start(*args, **kwargs)
            except BaseException as exc:  # handed to the caller below, or dropped if it gave up
                box["error"] = exc
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
        self.late.append(worker)
        raise SandboxStartTimeout(f"the sandbox did not start within {self.deadline_s:g}s (--start-timeout)",
                                  run_id=kwargs.get("run_id"), deadline_s=self.deadline_s)

    def join_late(self, timeout_s: float | None = None) -> None:
        """Wait for abandoned starts to finish (and close what they made)."""
        for worker in self.late:
            worker.join(timeout_s)
