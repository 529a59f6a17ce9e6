"""Sandbox starts admitted across a Ray cluster (``--start-slots``): one named
actor per batch holds the slots, so workers on every node share one limit.

A slot is held under the token of one submitted Ray task. The worker gives it
back once its sandbox is up (or its attempt is over); the driver gives it back
again when it collects the task, also when Ray reports the task lost, so a
holder killed mid-start does not keep its slot. A token given back is ended:
an ``acquire`` of it still waiting (its caller died while queued) returns at
once without taking a slot.

The actor lives on the driver's node, pinned there: it ends with the driver,
and a worker node lost takes no slots with it.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

# Named actors of this project live in one Ray namespace.
NAMESPACE = "escrow"
PREFIX = "escrow-start-slots-"


class StartSlots:
    """The actor's body (an async Ray actor: one event loop, no locks needed)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.holders: set[str] = set()
        self.ended: set[str] = set()
        self.waiting = 0
        self.most = 0  # the most holders at once, for tests and diagnostics
        self.changed = asyncio.Condition()

    async def acquire(self, token: str) -> bool:
        """Wait for a slot; False when ``token`` was ended while it waited."""
        async with self.changed:
            self.waiting += 1
            try:
                await self.changed.wait_for(lambda: token in self.ended or len(self.holders) < self.slots)
            finally:
                self.waiting -= 1
            if token in self.ended:
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

    async def state(self) -> dict[str, Any]:
        return {"slots": self.slots, "holders": sorted(self.holders), "waiting": self.waiting, "most": self.most}


def slots_name(batch_id: str) -> str:
    """A fresh name under the batch's prefix (a dead driver's actor may linger a moment)."""
    return f"{PREFIX}{batch_id}-{uuid.uuid4().hex[:8]}"


def start_slots_actor(ray: Any, batch_id: str, slots: int) -> Any:
    """The batch's slot actor, pinned to this (the driver's) node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
    return ray.remote(StartSlots).options(
        name=slots_name(batch_id), namespace=NAMESPACE, num_cpus=0, max_concurrency=1000, max_restarts=0,
        scheduling_strategy=here,
    ).remote(slots)


def new_token() -> str:
    return uuid.uuid4().hex
