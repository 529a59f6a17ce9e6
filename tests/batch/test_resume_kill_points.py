"""An attempt whose verdict is committed stands across any driver death.

A batch driver's attempt goes through the writes of ``runner.run_attempt``
(the attempt row, the run with its lease and the attempt's note of it, the
run's turns, its verdict, the lease dropped, the attempt's outcome), in a
child process SIGKILLed just before its Nth commit (a hook on the store's
engine: a deterministic kill point, for every N of the attempt's life).
Then ``escrow batch --resume`` twice, through the same store calls the CLI
makes (``abandon_started``, then the pending tasks, each run to the end):
whatever the point of death, each task has exactly one run with a verdict,
one attempt whose outcome is the model's, and a task whose verdict was
committed is never run again."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from orchestrator.composition.batch.runner import INFRASTRUCTURE_FAILURE
from store import Store
from store.write import batches as bstore

ROOT = Path(__file__).resolve().parents[2]
TASKS = ("alpha", "beta")

# One attempt's writes, in run_attempt's order; exits 0 when it got to the end.
ATTEMPT = """
import os, random, signal, sys
from sqlalchemy import event
from store import Recorder, Store
from store.write import synthetic
from store.write import batches as bstore
from store.read import liveness
url, batch_id, task_id, kill_at = sys.argv[1:]
commits = [0]
with Store.open(url) as store:
    def counted(conn):
        commits[0] += 1
        if commits[0] == int(kill_at):
            os.kill(os.getpid(), signal.SIGKILL)
    event.listen(store._writer, "commit", counted)  # every write goes through it
    attempt_id = bstore.start_attempt(store, batch_id, task_id)
    recorder = Recorder(store)
    claim = liveness.LeaseClaim(owner="driver-%d" % os.getpid(), lease_s=0.01, attempt_id=attempt_id)
    run_id = recorder.start_run(task=task_id, repo="/repo", config={"batch": batch_id, "task_id": task_id},
                                policy={}, model="gemma-3-270m", lease=claim)
    rng, history = random.Random(7), []
    for turn in range(2):
        synthetic.record_turn(recorder, run_id, turn, history, rng)
    recorder.finish_run(run_id, "PASS", "the verifier passed", turn=2)
    liveness.release_lease(store, run_id)
    bstore.finish_attempt(store, attempt_id, outcome=bstore.MODEL, run_id=run_id, verdict="PASS")
print(commits[0])
"""


def attempt(url: str, batch_id: str, task_id: str, kill_at: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", ATTEMPT, url, batch_id, task_id, str(kill_at)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def new_batch(store: Store) -> str:
    rows = {t: (i + 1, {"id": t, "task": f"fix {t}", "repo": t}) for i, t in enumerate(TASKS)}
    return bstore.create_batch(store, task_file="tasks.jsonl", tasks=rows, settings={})


def resume(store: Store, url: str, batch_id: str) -> list[str]:
    """What ``escrow batch --resume`` does before and while running: the
    driver's attempts left started settled, then each pending task run."""
    bstore.abandon_started(store, batch_id, verdict=INFRASTRUCTURE_FAILURE,
                           error="the batch's driver ended before this attempt did; resumed")
    view = bstore.load_batch(store, batch_id)
    assert view is not None
    pending = view.pending()
    for task_id in pending:
        done = attempt(url, batch_id, task_id)
        assert done.returncode == 0, done.stderr
    return pending


@pytest.fixture(scope="module")
def writes(tmp_path_factory) -> int:
    """How many commits one attempt's life makes."""
    url = f"sqlite:///{tmp_path_factory.mktemp('count') / 'escrow.db'}"
    with Store.open(url) as store:
        batch_id = new_batch(store)
    done = attempt(url, batch_id, TASKS[0])
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_every_write_of_an_attempts_life_is_a_kill_point(writes, tmp_path):
    assert writes >= 8  # attempt, run, two turns of several commits, verdict, lease, outcome
    lost, twice = [], []
    for kill_at in range(1, writes + 1):
        path = tmp_path / f"kill{kill_at}.db"
        url = f"sqlite:///{path}"
        with Store.open(url) as store:
            batch_id = new_batch(store)
        killed = attempt(url, batch_id, TASKS[0], kill_at)
        assert killed.returncode == -9, (kill_at, killed.stderr)  # the driver died at that write
        with closing(sqlite3.connect(path)) as conn:
            verdict_before = conn.execute("SELECT count(*) FROM events WHERE kind = 'verdict'").fetchone()[0]
        with Store.open(url) as store:
            first = resume(store, url, batch_id)
            second = resume(store, url, batch_id)
            view = bstore.load_batch(store, batch_id)
        assert second == [], (kill_at, second)
        if verdict_before and TASKS[0] in first:
            twice.append(kill_at)
        with closing(sqlite3.connect(path)) as conn:
            verdicts = dict(conn.execute(
                "SELECT r.task, count(*) FROM events e JOIN runs r ON r.id = e.run_id WHERE e.kind = 'verdict' "
                "GROUP BY r.task").fetchall())
        if verdicts != {t: 1 for t in TASKS}:
            lost.append((kill_at, verdicts))
        assert view is not None
        latest = view.latest()
        assert {t: latest[t].outcome for t in TASKS} == {t: bstore.MODEL for t in TASKS}, kill_at
        assert {t: latest[t].verdict for t in TASKS} == {t: "PASS" for t in TASKS}, kill_at
        models = [a for a in view.attempts if a.outcome == bstore.MODEL]
        assert sorted(a.task_id for a in models) == sorted(TASKS), (kill_at, view.attempts)
        # The attempt stood on the run the killed driver recorded, not on one made again.
        if verdict_before:
            with closing(sqlite3.connect(path)) as conn:
                (run_id,) = conn.execute("SELECT run_id FROM events WHERE kind = 'verdict' ORDER BY at LIMIT 1"
                                         ).fetchone()
            assert latest[TASKS[0]].run_id == run_id, kill_at
    assert twice == [] and lost == [], json.dumps({"run twice": twice, "verdicts off": lost})


def test_a_started_attempt_of_a_run_with_a_verdict_becomes_its_outcome_on_the_ray_path_too(tmp_path):
    """``settle_lost``, the Ray executor's settling of a lost worker's task,
    reads the same chained verdict."""
    path = tmp_path / "escrow.db"
    url = f"sqlite:///{path}"
    with Store.open(url) as store:
        batch_id = new_batch(store)
    # Count the commits, then kill at the attempt's outcome (the last write).
    done = attempt(url, batch_id, TASKS[1])
    writes_before_outcome = int(done.stdout.split()[-1])
    killed = attempt(url, batch_id, TASKS[0], writes_before_outcome)
    assert killed.returncode == -9
    with Store.open(url) as store:
        seen = bstore.settle_lost(store, batch_id, TASKS[0], after=0, verdict=INFRASTRUCTURE_FAILURE,
                                  error="the worker was lost")
        view = bstore.load_batch(store, batch_id)
    assert (seen.outcome, seen.verdict) == (bstore.MODEL, "PASS")
    assert view is not None and view.pending() == []
