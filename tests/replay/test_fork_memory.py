"""Fork through the Replayer API without Docker: the prefix is replayed with
tools re-executed (in a fresh MemoryTools workspace), the rest goes live to
the fault server with overridden sampling, and the fork replays offline."""

from __future__ import annotations

from contextlib import contextmanager

from orchestrator.adapters.fault_server import FaultServer
from orchestrator.adapters.model_client.client import ModelClient
from orchestrator.replay import ForkOverrides, Replayer, trajectory_digest
from policies import default_policy
from store import Store
from tests.replay.recording import (
    BROKEN_MEAN,
    EXAMPLE_REPO,
    FIXED_MEAN,
    MemoryTools,
    call,
    fixing_steps,
    record_memory_run,
    reply,
)


def memory_tools_for(run_id: str):  # noqa: ARG001 - one fresh workspace per run, as a sandbox would be
    @contextmanager
    def opened():
        yield MemoryTools({p.name: p.read_text() for p in EXAMPLE_REPO.glob("*.py")}, default_policy())

    return opened()


def test_fork_shares_its_prefix_and_goes_live_with_new_sampling(store: Store, fault_server: FaultServer):
    parent = record_memory_run(store, fault_server, fixing_steps())
    fault_server.script(
        [reply(call("edit_file", path="calc.py", old=BROKEN_MEAN, new=FIXED_MEAN)), reply(call("submit"))]
    )
    seen = len(fault_server.requests)
    replayer = Replayer(store)
    with ModelClient(fault_server.base_url) as client:
        report = replayer.fork(replayer.load(parent), 2, tools_for=memory_tools_for, live_model=client,
                               overrides=ForkOverrides(temperature=0.3, max_tokens=128, model="other-model"))
    assert report.identical and report.verdict == "PASS" and len(report.turns) == 2
    fork = store.run(report.replay_run_id)
    assert (fork.mode, fork.parent_run_id, fork.forked_at_turn) == ("fork", parent, 2)
    live = [r.json for r in fault_server.requests[seen:]]
    assert [(b["model"], b["temperature"], b["max_tokens"]) for b in live] == [("other-model", 0.3, 128)] * 2
    assert trajectory_digest(store.trajectory(fork.id), turns=2) == trajectory_digest(store.trajectory(parent), turns=2)
    assert trajectory_digest(store.trajectory(fork.id), turns=3) != trajectory_digest(store.trajectory(parent), turns=3)
    again = replayer.offline(replayer.load(fork.id))
    assert again.identical and again.digest == again.recorded_digest
    # A fork of the fork keeps the first switch and adds its own.
    fault_server.script([reply(call("submit"))])
    with ModelClient(fault_server.base_url) as client:
        second = replayer.fork(replayer.load(fork.id), 3, tools_for=memory_tools_for, live_model=client,
                               overrides=ForkOverrides(seed=99))
    assert second.identical and second.verdict == "PASS"
    body = fault_server.requests[-1].json
    assert (body["model"], body["temperature"], body["seed"]) == ("other-model", 0.3, 99)
    assert replayer.offline(replayer.load(second.replay_run_id)).identical
