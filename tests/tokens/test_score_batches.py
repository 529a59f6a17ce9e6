"""``escrow score`` given batch ids (each task's latest recorded run), ids
refused before the teacher hears a thing, and a scoring killed mid-batch
(SIGKILL) whose rerun asks the teacher exactly for the calls left without
a row. The teacher is the fault server posing as vLLM, over loopback HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import insert
from typer.testing import CliRunner, Result

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer, Reply
from orchestrator.errors import EscrowError
from orchestrator.exit_codes import ExitCode
from store.schema.tables import BatchRow, table_of
from store.store import Store
from store.write.batches import INFRASTRUCTURE, MODEL, create_batch, finish_attempt, start_attempt
from tests.tokens.conftest import growing, record

CALLS = 3
VLLM = {"/version": {"version": "0.11.0"}}
ROOT = Path(__file__).resolve().parents[2]


def recorded(student: FaultServer, db: Path, runs: int) -> list[str]:
    """``runs`` runs of CALLS answered calls each, every call's ids its own."""
    student.script([reply for run in range(runs) for reply in growing(CALLS, start=5 + run)])
    return [record(db, student.base_url, CALLS)[0] for _ in range(runs)]


def batch(db: Path, attempts: dict[str, list[str | None]]) -> str:
    """A batch whose tasks made these runs, attempt by attempt (None: an attempt that made no run)."""
    with Store.open(f"sqlite:///{db}") as store:
        batch_id = create_batch(store, task_file="tasks.jsonl", settings={},
                                tasks={task: (line, {}) for line, task in enumerate(attempts, 1)})
        for task, run_ids in attempts.items():
            for run_id in run_ids:
                finish_attempt(store, start_attempt(store, batch_id, task), run_id=run_id, verdict="PASS",
                               outcome=MODEL if run_id else INFRASTRUCTURE)
    return batch_id


def score(db: Path, teacher: FaultServer, *args: str):
    return CliRunner().invoke(app, ["score", *args, "--teacher-url", teacher.base_url, "--teacher-model", "t",
                                    "--student-url", teacher.base_url, "--db", f"sqlite:///{db}"])


def refused(result: Result, code: ExitCode) -> str:
    """The message of the typed error the command raised, which exits with ``code``."""
    assert isinstance(result.exception, EscrowError) and result.exception.exit_code == code, result.output
    return result.exception.message


def scored_calls(db: Path, run_ids: list[str]) -> list[tuple[str, str]]:
    """Every score row's (run, call), read-only, as often as it is there."""
    with Store.open(f"sqlite:///{db}", readonly=True, create=False) as store:
        return [(run_id, row["call_id"]) for run_id in run_ids for row in store.teacher_scores(run_id)]


def test_a_batch_scores_each_tasks_latest_recorded_run(fault_server: FaultServer, tmp_path):
    db = tmp_path / "escrow.db"
    first, retried, kept, alone = recorded(fault_server, db, 4)
    # Task a was retried; task b's retry made no run, so its first run is its latest recorded one.
    batch_id = batch(db, {"a": [first, retried], "b": [kept, None]})
    with FaultServer(endpoints=VLLM) as teacher:
        teacher.script([Reply()], cycle=True)
        result = score(db, teacher, batch_id[:8], "--json")
        assert result.exit_code == 0, result.output
        assert len(teacher.requests) == 2 * CALLS
    assert [run["run_id"] for run in json.loads(result.stdout)["runs"]] == [retried, kept]
    calls = scored_calls(db, [first, retried, kept, alone])
    assert sorted({run for run, _ in calls}) == sorted([retried, kept]) and len(set(calls)) == len(calls) == 6
    with FaultServer(endpoints=VLLM) as teacher:  # the full id, with a run named besides: only that run is new
        teacher.script([Reply()], cycle=True)
        again = score(db, teacher, batch_id, alone, kept[:10])
        assert again.exit_code == 0, again.output
        assert len(teacher.requests) == CALLS
    assert [line for line in again.stdout.splitlines() if "calls scored now" in line] == [
        f"run {retried[:8]}: 0 calls scored now", f"run {kept[:8]}: 0 calls scored now",
        f"run {alone[:8]}: 3 calls scored now"]


def test_ids_naming_both_or_neither_are_refused_before_the_teacher_is_asked(fault_server: FaultServer, tmp_path):
    db = tmp_path / "escrow.db"
    (run_id,) = recorded(fault_server, db, 1)
    batch(db, {"a": [run_id]})
    # A batch whose id shares the run's first characters: that prefix names both.
    with Store.open(f"sqlite:///{db}") as store, store.write() as conn:
        conn.execute(insert(table_of(BatchRow)).values(id=run_id[:4] + "f" * 28, created_at=time.time(),
                                                       task_file="other.jsonl", n_tasks=0, settings_json="{}"))
    with FaultServer(endpoints=VLLM) as teacher:
        teacher.script([Reply()], cycle=True)
        both = score(db, teacher, run_id[:4])
        neither = score(db, teacher, run_id, "0123abcd")
        assert teacher.hits == [] and teacher.requests == []  # not even the vocabulary probes
    assert refused(both, ExitCode.RUN_NOT_FOUND) == (
        f"{run_id[:4]!r} matches both a run ({run_id[:12]}) and a batch ({run_id[:4]}ffffffff); give more characters")
    assert refused(neither, ExitCode.RUN_NOT_FOUND) == "no run or batch matches '0123abcd'"
    assert scored_calls(db, [run_id]) == []


def test_a_batch_without_runs_is_refused(fault_server: FaultServer, tmp_path):
    db = tmp_path / "escrow.db"
    recorded(fault_server, db, 1)
    batch_id = batch(db, {"a": [None], "b": []})
    with FaultServer(endpoints=VLLM) as teacher:
        result = score(db, teacher, batch_id)
        assert teacher.hits == []
    assert refused(result, ExitCode.NOTHING_TO_REPORT) == f"batch {batch_id[:12]} has no recorded run to score"


def waited(what: str, done: Callable[[], bool], proc: subprocess.Popen[bytes]) -> None:
    """Until ``done()``; a scoring that died or stalls fails here (the bound is liveness, not a timing)."""
    deadline = time.monotonic() + 60.0
    while not done():
        assert proc.poll() is None, f"escrow score exited {proc.returncode} while waiting for {what}"
        assert time.monotonic() < deadline, f"waited 60 s for {what}"
        time.sleep(0.02)


def test_a_scoring_killed_mid_batch_loses_only_unwritten_answers(fault_server: FaultServer, tmp_path):
    """Two workers, answers held until the test lets them go: pair by pair,
    the second call's answer first (its worker's next request shows it is
    in), then the first's, so each pair lands in one commit. After two pairs
    the next two calls are in flight, held, and the rest not yet asked:
    SIGKILL. The rerun asks for exactly the calls without a row."""
    db = tmp_path / "escrow.db"
    run_ids = recorded(fault_server, db, 3)
    with Store.open(f"sqlite:///{db}", readonly=True, create=False) as store:
        calls = [(run_id, call_id, [*envelope.prompt_token_ids, *envelope.completion_token_ids])
                 for run_id in run_ids for call_id, _, envelope in store.answered_envelopes(run_id)]
    assert len(calls) == 3 * CALLS
    escrow = Path(sys.executable).parent / "escrow"
    args = [str(escrow), "score", *run_ids, "--teacher-url", "URL", "--teacher-model", "t", "--student-url", "URL",
            "--parallel", "2", "--db", f"sqlite:///{db}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with FaultServer(endpoints=VLLM) as teacher:
        # The n-th request's answer is held until release(f"answer {n}"): the test picks which goes.
        teacher.script([Reply(delay_s=300.0, released_by=f"answer {n}") for n in range(len(calls))])
        argv = [teacher.base_url if a == "URL" else a for a in args]
        proc = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        def asked(call: int) -> Callable[[], bool]:
            return lambda: calls[call][2] in [r.json.get("prompt") for r in teacher.requests]

        def answer(call: int) -> None:
            waited(f"call {call}'s request", asked(call), proc)
            sent = [r.json.get("prompt") for r in teacher.requests]
            teacher.release(f"answer {sent.index(calls[call][2])}")

        def rows(n: int) -> Callable[[], bool]:
            return lambda: len(scored_calls(db, run_ids)) == n

        try:
            for pair in (0, 2):
                answer(pair + 1)
                waited(f"call {pair + 2}'s request", asked(pair + 2), proc)  # call pair + 1's worker is free
                answer(pair)
                waited(f"the rows of calls {pair} and {pair + 1}", rows(pair + 2), proc)
            # Calls 4 and 5 in flight, one a worker, held: nothing more can be written.
            waited("calls 4 and 5 in flight", asked(5), proc)
            before = scored_calls(db, run_ids)
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for n in range(len(calls)):
                teacher.release(f"answer {n}")  # the killed process's held requests end
        asked_first = [r.json["prompt"] for r in teacher.requests]
        assert sorted(asked_first) == sorted(call[2] for call in calls[:6])
        after = scored_calls(db, run_ids)
        assert after == before == [(run, call) for run, call, _ in calls[:4]]  # each written row, once
        verified = CliRunner().invoke(app, ["verify", "--all", "--db", f"sqlite:///{db}"])
        assert verified.exit_code == 0, verified.output

        teacher.script([Reply()], cycle=True)
        rerun = subprocess.run([*argv, "--resume"], env=env, cwd=tmp_path, capture_output=True, text=True,
                               timeout=120)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr
        asked_again = [r.json["prompt"] for r in teacher.requests][len(asked_first):]
    assert sorted(asked_again) == sorted(call[2] for call in calls[4:])  # exactly the calls without a row
    assert [f"run {run_id[:8]}: {n} calls scored now" for run_id, n in zip(run_ids, (0, 2, 3), strict=True)] == [
        line for line in rerun.stdout.splitlines() if "calls scored now" in line]
    final = scored_calls(db, run_ids)
    assert sorted(final) == sorted((run, call) for run, call, _ in calls)  # every call scored exactly once
    verified = CliRunner().invoke(app, ["verify", "--all", "--db", f"sqlite:///{db}"])
    assert verified.exit_code == 0, verified.output
