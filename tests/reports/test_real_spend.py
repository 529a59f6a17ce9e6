"""Aggregates count real spend once: an offline replay (its calls served
from the recording), a re-execution and a fork's shared prefix (its
parent's spend) are left out unless --include-replays asks for them."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer
from orchestrator.composition.launch.reports import report_runs
from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.replay import Replayer
from policies.price_table import load_price_table, set_price
from store import Recorder, Store
from tests.replay.recording import fixing_steps, record_memory_run
from tests.reports.conftest import envelope

PRICE = {"input_per_mtok": 2.0, "cached_input_per_mtok": 0.5, "output_per_mtok": 10.0, "gpu_per_hour": 3.6}


def totals(store: Store, home: Path, **kw: bool) -> tuple[int, int, float]:
    total = report_runs(store, by="model", since=None, until=None, prices=load_price_table(home), **kw).total
    assert total is not None
    return total.calls, total.prompt_tokens + total.completion_tokens, round(total.cost.total_usd, 9)


def test_offline_replays_are_not_billed_again(home: Path, store: Store, fault_server: FaultServer) -> None:
    set_price(home, fault_server.model, PRICE)
    runs = [record_memory_run(store, fault_server, fixing_steps()) for _ in range(2)]
    before = totals(store, home)
    assert before[0] > 0 and before[2] > 0
    replayer = Replayer(store)
    for run_id in runs:
        assert replayer.offline(replayer.load(run_id)).identical
    assert totals(store, home) == before
    calls, tokens, _ = totals(store, home, include_replays=True)
    assert (calls, tokens) == (2 * before[0], 2 * before[1])
    result = CliRunner().invoke(app, ["report", "--json", "--db", f"sqlite:///{home / 'escrow.db'}"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["total"]["calls"] == before[0]


def record_turns(recorder: Recorder, turns: int, **run: object) -> str:
    run_id = recorder.start_run(task="t", repo="/r", model="gemma-3-270m", config={}, policy={}, **run)  # type: ignore[arg-type]
    for turn in range(turns):
        with recorder.turn(run_id, turn) as tx:
            request = ModelRequest(model="gemma-3-270m", messages=(Message(role="user", content=f"turn {turn}"),),
                                   max_tokens=64, sampling=Sampling())
            tx.envelope(tx.request(request), envelope(1000 + turn, 0, 10))
    recorder.finish_run(run_id, "PASS")
    return run_id


def test_a_forks_shared_prefix_is_its_parents_spend(home: Path, store: Store) -> None:
    set_price(home, "gemma-3-270m", PRICE)
    recorder = Recorder(store)
    parent = record_turns(recorder, 3)
    record_turns(recorder, 3, mode="fork", parent_run_id=parent, forked_at_turn=2)
    record_turns(recorder, 3, mode="reexecute", parent_run_id=parent)
    calls, tokens, _ = totals(store, home)
    # The parent's three calls, and the fork's one live call (turn 2).
    assert calls == 4 and tokens == (1000 + 1001 + 1002 + 30) + (1002 + 10)
    assert totals(store, home, include_replays=True)[0] == 9
