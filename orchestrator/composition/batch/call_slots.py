"""Model calls in flight per replica, at most as many as the replica serves at
once. Past that, a server queues the request, and the queued time counts
against the call's deadline (T_max bounds the whole call): with four runs on
a one-slot server, a call waits behind three others and ends
TRANSPORT_FAILURE although the server is healthy. Held here instead, the
wait is the batch's, bounded by the task deadline, and T_max starts when the
server can take the call.

The limit is ``--replica-slots`` when given (0: none), otherwise what the
engine says: llama.cpp's ``/props`` slot count, one for llama-cpp-python
(its server runs one request at a time), none for an engine that does not say.
A server tokenizer's requests take a slot too: llama-cpp-python answers them
only between completions, so behind another run's call they would time out.
On Ray the gates are shared by every worker of the batch (``ray_slots``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from orchestrator.adapters.model_client.provenance import EngineInfo
from orchestrator.context.tokenizer import TokenCounter
from orchestrator.contract import ModelRequest
from orchestrator.envelope import Envelope
from orchestrator.ports import Model

WAIT_POLL_S = 0.2  # how often a queued call looks at its cancel event


def engine_slots(info: EngineInfo | None) -> int | None:
    """Requests the engine serves at once, when it is known."""
    if info is None:
        return None
    slots = info.settings.get("slots")
    if info.engine == "llama.cpp" and isinstance(slots, int) and slots > 0:
        return slots
    if info.engine == "llama-cpp-python":
        return 1
    return None


class Gate(Protocol):
    """What a call waits on: a semaphore here, or one shared across a Ray
    cluster (``ray_slots.SharedGate``)."""

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool: ...

    def release(self) -> None: ...


class CallSlots:
    """One gate per replica, sized on the first call to it. ``make_gate``
    builds it from the replica and its size (a process-local semaphore by default)."""

    def __init__(self, limit: int | None = None,
                 make_gate: Callable[[str, int], Gate] = lambda replica, size: threading.Semaphore(size)) -> None:
        self.limit, self.lock, self.make_gate = limit, threading.Lock(), make_gate
        self.gates: dict[str, Gate | None] = {}

    def gate(self, replica: str, engine: EngineInfo | None) -> Gate | None:
        with self.lock:
            if replica not in self.gates:
                size = engine_slots(engine) if self.limit is None else self.limit
                self.gates[replica] = self.make_gate(replica, size) if size else None
            return self.gates[replica]

    def around(self, replica: str, model: Model, counter: TokenCounter) -> tuple[Model, TokenCounter]:
        """The run's model client and token counter, each waiting for a slot
        of ``replica`` (sized now, from the engine the client probed)."""
        engine_info = getattr(model, "engine_info", None)
        gate = self.gate(replica, engine_info() if callable(engine_info) else None)
        if gate is None:
            return model, counter
        remote = counter.name.startswith("server:")  # an offline tokenizer needs no slot
        return GatedModel(model, gate), GatedCounter(counter, gate) if remote else counter


class GatedModel:
    """The Model port, each call waiting for a free slot of its replica first."""

    def __init__(self, model: Model, gate: Gate) -> None:
        self.model, self.gate = model, gate

    def call(self, request: ModelRequest, *, cancel: threading.Event | None = None) -> Envelope:
        gate = self.gate
        while not gate.acquire(timeout=WAIT_POLL_S):
            if cancel is not None and cancel.is_set():
                return self.model.call(request, cancel=cancel)  # the client ends it CANCELED at once
        try:
            return self.model.call(request, cancel=cancel)
        finally:
            gate.release()


class GatedCounter:
    """A server tokenizer whose requests wait for a free slot of the replica."""

    def __init__(self, counter: TokenCounter, gate: Gate) -> None:
        self.counter, self.gate = counter, gate

    @property
    def name(self) -> str:
        return self.counter.name

    def count(self, text: str) -> int:
        self.gate.acquire()
        try:
            return self.counter.count(text)
        finally:
            self.gate.release()
