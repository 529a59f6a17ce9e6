"""Limits shared by the workers of a batch on every node of a Ray cluster:
sandbox starts (``--start-slots``, ``StartSlots``) and model calls per replica
(``--replica-slots`` or the engine's count, ``CallGates``). One named actor
per batch and limit holds the slots.

A slot is held under the token of one submitted Ray task. The worker gives it
back once its sandbox is up (or its attempt is over); the driver gives it back
again when it collects the task, also when Ray reports the task lost, so a
holder killed mid-start does not keep its slot. A token given back is ended:
an ``acquire`` of it still waiting (its caller died while queued) returns at
once without taking a slot.

Ctrl-C on the driver stops the batch here first (``stop``): no start slot is
handed out after it, and every worker, watching through ``wait_stopped``,
cancels its run, also one whose Ray task the driver's cancel missed (a task
handed out as the signal came).

A call slot is held under its Ray task's token too: the driver gives back
every call slot of a task it collects, so a worker killed mid-call frees its
slot.

The actors live on the driver's node, pinned there: they end with the driver,
and a worker node lost takes no slots with it.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from typing import Any

# Named actors of this project live in one Ray namespace.
NAMESPACE = "escrow"
PREFIX = "escrow-start-slots-"
CALLS_PREFIX = "escrow-call-slots-"


class StartSlots:
    """The actor's body (an async Ray actor: one event loop, no locks needed)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.holders: set[str] = set()
        self.ended: set[str] = set()
        self.waiting = 0
        self.most = 0  # the most holders at once, for tests and diagnostics
        self.changed = asyncio.Condition()
        self.stopped = asyncio.Event()

    async def acquire(self, token: str) -> bool:
        """Wait for a slot; False when ``token`` was ended while it waited, or the batch stopped."""
        async with self.changed:
            self.waiting += 1
            try:
                await self.changed.wait_for(lambda: token in self.ended or self.stopped.is_set()
                                            or len(self.holders) < self.slots)
            finally:
                self.waiting -= 1
            if token in self.ended or self.stopped.is_set():
                return False
            self.holders.add(token)
            self.most = max(self.most, len(self.holders))
            return True

    async def release(self, token: str) -> None:
        """Give the slot of ``token`` back (any number of times)."""
        async with self.changed:
            self.ended.add(token)
            self.holders.discard(token)
            self.changed.notify_all()

    async def stop(self) -> None:
        """The batch stops: no slot from now on, and every watcher is told."""
        async with self.changed:
            self.stopped.set()
            self.changed.notify_all()

    async def wait_stopped(self, timeout: float) -> bool:
        """Whether the batch stopped within ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self.stopped.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def state(self) -> dict[str, Any]:
        return {"slots": self.slots, "holders": sorted(self.holders), "waiting": self.waiting, "most": self.most}


class CallGates:
    """The actor's body: per replica, at most ``size`` calls in flight."""

    def __init__(self) -> None:
        self.held: dict[str, tuple[str, str]] = {}  # call token -> (replica, task token)
        self.ended: set[str] = set()  # task tokens given back by the driver
        self.most: dict[str, int] = {}
        self.changed = asyncio.Condition()

    def _in_flight(self, replica: str) -> int:
        return sum(r == replica for r, _ in self.held.values())

    async def acquire(self, replica: str, size: int, task: str, call: str, timeout: float) -> bool:
        """Take a slot of ``replica`` for ``call`` within ``timeout`` seconds."""
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(
                    lambda: task in self.ended or self._in_flight(replica) < size), timeout)
            except asyncio.TimeoutError:
                return False
            if task in self.ended:
                return False
            self.held[call] = (replica, task)
            self.most[replica] = max(self.most.get(replica, 0), self._in_flight(replica))
            return True

    async def release(self, call: str) -> None:
        async with self.changed:
            self.held.pop(call, None)
            self.changed.notify_all()

    async def release_task(self, task: str) -> None:
        """Every slot ``task`` holds, and none it asks for later (its worker died)."""
        async with self.changed:
            self.ended.add(task)
            self.held = {c: held for c, held in self.held.items() if held[1] != task}
            self.changed.notify_all()

    async def state(self) -> dict[str, Any]:
        return {"held": len(self.held), "most": dict(self.most)}


class SharedGate:
    """A ``call_slots.Gate`` backed by the batch's ``CallGates`` actor, in a worker."""

    def __init__(self, gates: Any, replica: str, size: int, task: str) -> None:
        self.gates, self.replica, self.size, self.task = gates, replica, size, task
        self.numbers = itertools.count()
        self.holding: list[str] = []  # a run's calls and counts take turns: one at a time

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        import ray

        call = f"{self.task}:{next(self.numbers)}"
        wait = 3600.0 if timeout is None else timeout
        while not ray.get(self.gates.acquire.remote(self.replica, self.size, self.task, call, wait)):
            if timeout is not None or not blocking:
                return False
        self.holding.append(call)
        return True

    def release(self) -> None:
        self.gates.release.remote(self.holding.pop(0))


def slots_name(batch_id: str, prefix: str = PREFIX) -> str:
    """A fresh name under the batch's prefix (a dead driver's actor may linger a moment)."""
    return f"{prefix}{batch_id}-{uuid.uuid4().hex[:8]}"


def _pinned_actor(ray: Any, body: type, name: str, *args: Any) -> Any:
    """A named actor on this (the driver's) node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(body).options(
        name=name, namespace=NAMESPACE, num_cpus=0, max_concurrency=1000, max_restarts=0, scheduling_strategy=here,
    ).remote(*args)


def start_slots_actor(ray: Any, batch_id: str, slots: int) -> Any:
    return _pinned_actor(ray, StartSlots, slots_name(batch_id), slots)


def call_gates_actor(ray: Any, batch_id: str) -> Any:
    return _pinned_actor(ray, CallGates, slots_name(batch_id, CALLS_PREFIX))


def new_token() -> str:
    return uuid.uuid4().hex
