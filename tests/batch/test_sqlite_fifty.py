"""Fifty concurrent runs on one SQLite store file: no "database is locked"
reaches a caller, and every chain verifies (``escrow verify --all``).

Economical on a small machine: instead of fifty sandboxes, fifty forked
processes drive the Recorder directly, each writing what a batch worker writes
for one run: its attempt row, its lease (taken, renewed every turn,
released), a realistic trajectory of six turns (write-ahead request, envelope,
candidates and their transitions, tool executions, events), its verdict, and
reads of the run list between turns. They start together at a barrier. Each
process opens its own Store, as each ``escrow run``/batch run does, so the
contention is between real SQLite connections and file locks.

Before the store retried a writer's BEGIN IMMEDIATE after a jittered pause,
this failed: SQLite's busy handler is not fair, and under this load some
writer waited past the 30 s busy timeout ("database is locked", 1 to 9 of the
50 runs on a loaded 2-core machine). The control case runs the same load with
no busy timeout and no retries and expects "database is locked": it shows the
load does contend, so the main case could fail.
"""

from __future__ import annotations

import multiprocessing
import traceback

from typer.testing import CliRunner

from cli.main import app
from store import Recorder, Store
from store.read import liveness
from store.write import batches as bstore
from store.write import synthetic

RUNS = 50
TURNS = 6


def one_run(url: str, batch_id: str, index: int, busy_timeout_ms: int, retries: int, barrier, results) -> None:
    barrier.wait(timeout=300)
    results.put((index, record_one_run(url, batch_id, index, busy_timeout_ms, retries)))


def record_one_run(url: str, batch_id: str, index: int, busy_timeout_ms: int, retries: int) -> list[str]:
    """What a batch worker writes for one run; the errors it met."""
    errors: list[str] = []
    try:
        with Store.open(url, busy_timeout_ms=busy_timeout_ms, write_retries=retries) as store:
            recorder = Recorder(store)
            attempt = bstore.start_attempt(store, batch_id, f"t{index}")
            rng = synthetic.random.Random(index)
            run_id = synthetic.start(recorder, rng)
            liveness.take_lease(store, run_id, f"test:{index}", lease_s=60, attempt_id=attempt)
            history: list = []
            for turn in range(TURNS):
                synthetic.record_turn(recorder, run_id, turn, history, rng)
                liveness.renew_lease(store, run_id, 60)
                store.runs(limit=5)
            recorder.finish_run(run_id, "PASS", "the verifier passed", turn=TURNS)
            bstore.finish_attempt(store, attempt, outcome=bstore.MODEL, run_id=run_id, verdict="PASS")
            liveness.release_lease(store, run_id)
    except Exception:
        errors.append(traceback.format_exc())
    return errors


def fifty_batch(url: str) -> str:
    with Store.open(url) as store:
        return bstore.create_batch(store, task_file="fifty.jsonl", settings={},
                                   tasks={f"t{i}": (i + 1, {}) for i in range(RUNS)})


def fifty_runs(tmp_path, busy_timeout_ms: int, retries: int) -> tuple[str, str, list[str]]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    batch_id = fifty_batch(url)
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(RUNS), ctx.Queue()
    procs = [ctx.Process(target=one_run, args=(url, batch_id, i, busy_timeout_ms, retries, barrier, results))
             for i in range(RUNS)]
    for p in procs:
        p.start()
    reports = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert sorted(i for i, _ in reports) == list(range(RUNS))
    return url, batch_id, [e for _, errs in reports for e in errs]


def test_fifty_concurrent_runs_on_one_sqlite_file(tmp_path):
    url, batch_id, errors = fifty_runs(tmp_path, busy_timeout_ms=30_000, retries=8)
    assert errors == [], errors[0]
    every_chain_verifies(url, batch_id)


def every_chain_verifies(url: str, batch_id: str) -> None:
    verified = CliRunner().invoke(app, ["verify", "--all", "--db", url])
    assert verified.exit_code == 0, verified.output
    with Store.open(url, readonly=True) as store:
        view = bstore.load_batch(store, batch_id)
        runs = store.runs(limit=RUNS + 10)
        checks = store.verify_all()
    assert len(runs) == RUNS and {s.run.verdict for s in runs} == {"PASS"}
    assert all(s.totals.turns == TURNS for s in runs)
    assert len(checks) == RUNS and all(c.ok for c in checks)
    assert view.pending() == [] and len(view.attempts) == RUNS


def test_the_same_load_without_a_busy_timeout_does_lock(tmp_path):
    _, _, errors = fifty_runs(tmp_path, busy_timeout_ms=0, retries=0)
    assert any("database is locked" in e for e in errors), "the load did not contend; the main case proves nothing"
