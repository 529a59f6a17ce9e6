"""One writer and eight reader processes on one store for 30 s: no
SQLITE_BUSY (or any other error) reaches a caller, and every snapshot a reader
takes verifies."""

from __future__ import annotations

import multiprocessing
import os
import random
import time
import traceback

import pytest

from store import Recorder, Store
from store.write import synthetic

SECONDS = float(os.environ.get("ESCROW_TEST_CONCURRENCY_S", "30"))
READERS = 8


def writer(path: str, deadline: float, results) -> None:
    done, errors = 0, []
    try:
        with Store.open(f"sqlite:///{path}") as store:
            recorder = Recorder(store)
            rng = random.Random(1)
            while time.time() < deadline:
                run_id = synthetic.start(recorder, rng)
                history: list = []
                for turn in range(rng.randrange(1, 8)):
                    synthetic.record_turn(recorder, run_id, turn, history, rng)
                    done += 1
                recorder.finish_run(run_id, "PASS", "ok")
    except Exception:
        errors.append(traceback.format_exc())
    results.put(("writer", done, errors))


def reader(path: str, deadline: float, seed: int, results) -> None:
    done, errors = 0, []
    rng = random.Random(seed)
    while time.time() < deadline:
        try:
            with Store.open(f"sqlite:///{path}", readonly=True) as store:
                for _ in range(20):
                    summaries = store.runs(limit=20)
                    if summaries:
                        run_id = rng.choice(summaries).run.id
                        store.trajectory(run_id)
                        check = store.verify(run_id)
                        if not check.ok:
                            errors.append(f"snapshot of {run_id} did not verify: {check.problem}")
                    done += 1
        except Exception:
            errors.append(traceback.format_exc())
    results.put(("reader", done, errors))


@pytest.mark.slow
def test_one_writer_and_eight_readers_see_no_busy_errors(tmp_path):
    path = tmp_path / "escrow.db"
    with Store.open(f"sqlite:///{path}") as store:
        synthetic.record_run(Recorder(store), turns=2)
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    deadline = time.time() + SECONDS
    procs = [ctx.Process(target=writer, args=(str(path), deadline, results))]
    procs += [ctx.Process(target=reader, args=(str(path), deadline, i, results)) for i in range(READERS)]
    for p in procs:
        p.start()
    reports = [results.get(timeout=SECONDS + 120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    errors = [e for _, _, errs in reports for e in errs]
    assert not errors, errors[:3]
    writes = sum(n for kind, n, _ in reports if kind == "writer")
    reads = sum(n for kind, n, _ in reports if kind == "reader")
    assert writes > 10 and reads > READERS * 10, (writes, reads)
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        assert store.integrity_check() == "ok" and all(c.ok for c in store.verify_all())
    print(f"{SECONDS:.0f}s: {writes} turns written, {reads} reader rounds, no errors")
