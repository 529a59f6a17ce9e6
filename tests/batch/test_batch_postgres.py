"""Batches, attempts and leases on PostgreSQL (a throwaway cluster, as the
store tests start it): a run whose lease lapsed reads as crashed, resume
picks exactly the tasks without a model verdict."""

from __future__ import annotations

import json
import time

from typer.testing import CliRunner

from cli.main import app
from store import Recorder, Store
from store.read import liveness
from store.write import batches as bstore
from store.write import synthetic
from tests.store.test_postgres import postgres_url  # noqa: F401  (fixture)


def test_batch_bookkeeping_on_postgresql(postgres_url):  # noqa: F811
    with Store.open(postgres_url) as store:
        recorder = Recorder(store)
        done = synthetic.record_run(recorder, turns=1, seed=11)
        dead = synthetic.record_run(recorder, turns=1, seed=12, finish=False)
        batch_id = bstore.create_batch(store, task_file="t.jsonl", settings={},
                                       tasks={"a": (1, {}), "b": (2, {}), "c": (3, {})})
        first = bstore.start_attempt(store, batch_id, "a")
        bstore.finish_attempt(store, first, outcome=bstore.MODEL, run_id=done, verdict="PASS")
        crashed = bstore.start_attempt(store, batch_id, "b")
        taken = time.time()
        liveness.take_lease(store, dead, "elsewhere:1", lease_s=0.5, attempt_id=crashed)
        # Read at chosen moments, not after a sleep: alive within its lease, crashed past it.
        assert dead not in liveness.crashed_runs(store, now=taken)
        past = time.time() + 1.0  # later than the lease's end, however long taking it took
        assert liveness.crashed_runs(store, now=past) == {dead}
        assert bstore.load_batch(store, batch_id).pending() == ["b", "c"]
    # The commands below read the real clock: they run once the lease has lapsed.
    while time.time() <= past:
        time.sleep(0.05)
    result = CliRunner().invoke(app, ["batch", "status", batch_id[:8], "--json", "--db", postgres_url])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert (shown["done"], shown["passed"], shown["not_started"]) == (1, 1, 1)
    assert {t["task_id"]: t["outcome"] for t in shown["tasks"]}["b"] == "crashed"
    listed = CliRunner().invoke(app, ["runs", "--json", "--db", postgres_url])
    assert {r["id"]: r["status"] for r in json.loads(listed.stdout)}[dead] == "crashed"
