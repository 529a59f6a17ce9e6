"""Crash safety: writer processes SIGKILLed at random points while recording.

Each writer is forked from this (already initialised) process, records a
synthetic trajectory and reports every turn whose commit returned; it is
killed during start-up or after a random number of turns plus a random
fraction of one more. Afterwards every reported turn is there
and intact, at most the turn in flight is missing, SQLite's integrity check
passes and every chain verifies.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import select
import signal
import sqlite3
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest

from store import Recorder, Store
from store.schema.tables import CHAINED_TABLES
from store.write import synthetic

KILLS = int(os.environ.get("ESCROW_TEST_KILLS", "220"))
TURN_TABLES = [t for t in CHAINED_TABLES if t not in ("turns", "model_calls")]
# Committed right after the call, before the rest of the turn: an in-flight turn may have them.
CALL_RESULT_TABLES = ("model_responses", "call_attempts")


def write_until_killed(path: str, seed: int, report_fd: int) -> None:
    with Store.open(f"sqlite:///{path}") as store:
        recorder = Recorder(store)
        rng = random.Random(seed)
        run_id = synthetic.start(recorder, rng)
        os.write(report_fd, f"run {run_id}\n".encode())
        history: list = []
        for turn in range(10_000):
            synthetic.record_turn(recorder, run_id, turn, history, rng)
            os.write(report_fd, f"turn {run_id} {turn}\n".encode())
    os._exit(0)


class Reports:
    """Lines a writer reports through its pipe, read as they arrive."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buffer, self.lines, self.closed = fd, b"", [], False

    def wait_for(self, count: int, prefix: str, timeout: float = 30.0) -> None:
        """Block until ``count`` lines starting with ``prefix`` have arrived."""
        deadline = time.monotonic() + timeout
        while sum(1 for line in self.lines if line.startswith(prefix)) < count and not self.closed:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no progress from the writer within {timeout}s"
            self._read()

    def drain(self) -> list[str]:
        while not self.closed:
            self._read()
        return self.lines

    def _read(self) -> None:
        chunk = os.read(self.fd, 65536)
        self.closed = not chunk
        self.buffer += chunk
        *done, self.buffer = self.buffer.split(b"\n")
        self.lines += [line.decode() for line in done]


def committed_state(path: Path) -> dict:
    with closing(sqlite3.connect(path)) as conn:
        turns = {(r, t): n for r, t, n in conn.execute("SELECT run_id, turn, n_rows FROM turns")}
        calls = conn.execute(
            "SELECT c.run_id, c.turn, r.id IS NOT NULL FROM model_calls c LEFT JOIN model_responses r ON r.call_id = "
            "c.id"
        ).fetchall()
        rows, actions = Counter(), Counter()
        for table in TURN_TABLES:
            for run_id, turn, n in conn.execute(f"SELECT run_id, turn, count(*) FROM {table} GROUP BY run_id, turn"):
                rows[(run_id, turn)] += n
                if table not in CALL_RESULT_TABLES:
                    actions[(run_id, turn)] += n
        runs = [r[0] for r in conn.execute("SELECT id FROM runs")]
    return {"turns": turns, "calls": calls, "rows": rows, "actions": actions, "runs": runs}


@pytest.mark.slow
def test_sigkilled_writers_lose_at_most_the_turn_in_flight(tmp_path):
    path = tmp_path / "escrow.db"
    Store.open(f"sqlite:///{path}").close()  # created before any fork: no parent connection is shared
    fork = multiprocessing.get_context("fork")
    rng = random.Random(20240601)
    reported: set[tuple[str, int]] = set()
    started = time.monotonic()
    turn_s = 0.01  # running estimate of one turn's duration, so kills land inside turns on any machine
    for kill in range(KILLS):
        read_fd, write_fd = os.pipe()
        child = fork.Process(target=write_until_killed, args=(str(path), kill, write_fd))
        child.start()
        os.close(write_fd)
        reports = Reports(read_fd)
        target = rng.randrange(-1, 6)  # -1: kill during start-up, else after that many committed turns
        if target >= 0:
            reports.wait_for(1, "run ")
            began = time.monotonic()
            reports.wait_for(target, "turn ")
            if target:
                turn_s = 0.8 * turn_s + 0.2 * (time.monotonic() - began) / target
        time.sleep(rng.uniform(0.0, 1.5 * turn_s))
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        assert child.exitcode == -signal.SIGKILL, "the writer finished before it could be killed"
        for line in reports.drain():
            if line.startswith("turn "):
                _, run_id, turn = line.split()
                reported.add((run_id, int(turn)))
        os.close(read_fd)
    elapsed = time.monotonic() - started

    state = committed_state(path)
    # Every turn whose commit returned survived the kill.
    assert reported <= set(state["turns"])
    per_run: dict[str, list[int]] = {}
    for run_id, turn in state["turns"]:
        per_run.setdefault(run_id, []).append(turn)
    for run_id, numbers in per_run.items():
        assert sorted(numbers) == list(range(len(numbers))), run_id  # no committed turn missing in between
    # Committed turns are whole: all their rows, and a response for their call.
    for key, n_rows in state["turns"].items():
        assert state["rows"][key] == n_rows, key
    for run_id, turn, answered in state["calls"]:
        committed = len(per_run.get(run_id, []))
        if turn < committed:
            assert answered
        else:  # only the turn in flight may be missing, and then only its actions (the envelope may be there)
            assert turn == committed and state["actions"][(run_id, turn)] == 0
            if not answered:
                assert state["rows"][(run_id, turn)] == 0
    in_flight = sum(1 for run_id, turn, answered in state["calls"] if turn >= len(per_run.get(run_id, [])))
    assert in_flight > KILLS // 20, "kills should often land between the request and the turn's commit"
    assert len(state["runs"]) > KILLS // 2 and len(reported) > KILLS, (len(state["runs"]), len(reported))

    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        assert store.integrity_check() == "ok"
        checks = store.verify_all()
    assert len(checks) == len(state["runs"]) and all(c.ok for c in checks), [c for c in checks if not c.ok][:3]
    print(f"{KILLS} kills in {elapsed:.1f}s; {len(reported)} turns reported committed; {in_flight} requests in flight")
