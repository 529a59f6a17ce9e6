"""Replay composed: the store, the recorded run's sandbox and the live model
wired around the Replayer. ``escrow replay`` and library callers use
``replay_run``; the Replayer itself only sees ports."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import Any, Literal

import httpx

from orchestrator.adapters.model_client import ModelClient
from orchestrator.adapters.model_client.server_tokenizer import counter_for
from orchestrator.composition.launch.heartbeat import Heartbeat
from orchestrator.composition.launch.replay_workspace import sandbox_tools_for
from orchestrator.contract import Frozen
from orchestrator.interop.errors import not_replayable
from orchestrator.interop.records import IMPORT_MODE
from orchestrator.replay import ForkOverrides, Loaded, Replayer, ReplayReport
from orchestrator.replay.replayer import check_fork_turn
from orchestrator.settings import Settings
from policies.price_table import load_price_table
from policies.pricing import call_cost
from store import Store

ReplayMode = Literal["replay", "reexecute", "fork"]


class ReplayRequest(Frozen):
    """Which recorded run to replay, and how."""

    run: str
    mode: ReplayMode = "replay"
    force: bool = False
    record: bool = True
    fork_at: int | None = None
    overrides: ForkOverrides = ForkOverrides()
    model_url: str | None = None  # fork: the live server (default: the recorded one)
    allow_drift: bool = False


def replay_run(settings: Settings, request: ReplayRequest,
               progress: Callable[[int, int], None] = lambda done, total: None) -> ReplayReport:
    """Replay one recorded run; the replay is recorded as a run of its own
    unless ``record`` is off (offline only)."""
    # Read-only first: a store at an older schema is refused with the migrate
    # hint, never migrated behind the user's back.
    Store.open(settings.store_url, readonly=True, create=False).close()
    with Store.open(settings.store_url, readonly=not request.record, create=False, synchronous="NORMAL") as store:
        recorded = store.run(request.run)
        if recorded.mode == IMPORT_MODE:
            raise not_replayable(recorded.id, recorded.config)
        # A recorded replay holds a lease like any run: killed, it reads crashed.
        heartbeat = Heartbeat(store, settings.lease_s)
        try:
            replayer = Replayer(store, liveness=heartbeat, progress=progress)
            loaded = replayer.load(request.run, force=request.force)
            if request.mode == "fork":
                assert request.fork_at is not None  # ReplayRequest from the CLI always sets it with --fork-at
                return _fork(replayer, loaded, request, settings)
            if request.mode == "reexecute":
                tools_for = sandbox_tools_for(loaded.recorded, image=_image(loaded.recorded.config, settings),
                                              docker_host=settings.docker_host)
                return replayer.reexecute(loaded, tools_for)
            return replayer.offline(loaded, record=request.record)
        finally:
            heartbeat.close()


def _image(config: dict[str, Any], settings: Settings) -> str:
    return str(config.get("sandbox_image") or settings.sandbox_image)


def _fork(replayer: Replayer, loaded: Loaded, request: ReplayRequest, settings: Settings) -> ReplayReport:
    recorded, at, overrides = loaded.recorded, request.fork_at or 0, request.overrides
    check_fork_turn(recorded, at)
    base_url = request.model_url or recorded.config.get("model_url") or settings.model_url
    tools_for = sandbox_tools_for(recorded, image=_image(recorded.config, settings), docker_host=settings.docker_host)
    # The fork's live calls are priced like a live run's, from the price table.
    price = load_price_table(settings.home).lookup(overrides.model or recorded.spec.model)
    with ExitStack() as stack:
        client = stack.enter_context(ModelClient(base_url, api_key=settings.api_key))
        live_counter = None
        if not recorded.spec.tokenizer.startswith("tiktoken:"):
            http = stack.enter_context(httpx.Client(timeout=30.0))
            live_counter = counter_for("server", base_url=base_url, model=overrides.model or recorded.spec.model,
                                       http=http)
        return replayer.fork(loaded, at, tools_for=tools_for, live_model=client, overrides=overrides,
                             live_counter=live_counter, live_cost=lambda envelope: call_cost(envelope, price),
                             allow_drift=request.allow_drift)
