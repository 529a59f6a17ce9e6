"""Kill-and-resume sweep of real ``escrow batch`` drivers (issue 43's
closing figure: 0 tasks run twice).

Each trial is a fresh store and a real ``escrow batch`` of example tasks
(the keyed fault server plays each task's fix, every new run from the start;
sandboxes under the runtime asked for), its driver's process group SIGKILLed
at a random point: a random moment after its first attempt started, or as
soon as a run's verdict is committed while its attempt still reads started
(the window of issue 43's first defect). Then ``escrow batch --resume``, the
first one also SIGKILLed at a random moment in half the trials, and a second
one to the end. Counted per task: runs with a verdict (more than one is a
task run twice), attempts with the model's outcome (one each), and the
final report's tasks done. The batch flags and waits are
tests/batch/test_batch_cli.py's.

Usage: PYTHONPATH=. .venv/bin/python bench/sweep_resume.py [--trials 4] [--tasks 5] [--runtime runc|runsc]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from orchestrator.adapters.fault_server import FaultServer
from orchestrator.composition.batch.scripted import example_scripts
from store import Store
from store.write import batches as bstore
from tests.batch.conftest import EXAMPLES, subset_task_file
from tests.batch.test_batch_cli import _batch_ids, attempts
from tests.processes import ESCROW, cli_env, run_escrow

COMMON = ("--workers", "2", "--lease", "2", "--context-window", "8192", "--tokenizer", "cl100k_base",
          "--max-turns", "6", "--json")
TASKS = ("calc-mean", "roman-four", "kv-split-once", "leap-400", "clamp-bounds", "median-even", "chunks-tail")


def start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """``escrow ARGS`` in a process group of its own (the driver and what it started die together)."""
    return subprocess.Popen([str(ESCROW), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def kill_group(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)


def verdict_with_attempt_started(db: Path) -> bool:
    """A run's verdict committed while its attempt still reads started."""
    if not db.exists():
        return False
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
            return bool(conn.execute(
                "SELECT 1 FROM batch_attempts a JOIN events e ON e.run_id = a.run_id AND e.kind = 'verdict' "
                "WHERE a.outcome = ? LIMIT 1", (bstore.STARTED,)).fetchone())
    except sqlite3.OperationalError:  # the tables are not there yet
        return False


def wait(proc: subprocess.Popen[str], reached: Callable[[], bool], timeout_s: float = 600) -> bool:
    """Until ``reached``; False when the process ended first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if reached():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def kill_at_random(proc: subprocess.Popen[str], db: Path, rng: random.Random, window: bool) -> str:
    """Kill ``proc``: in the verdict-committed window, or at a random moment after an attempt started."""
    if window:
        if wait(proc, lambda: verdict_with_attempt_started(db)):
            kill_group(proc)
            # Still so once the driver is dead: the kill landed in the window, not just after it.
            return "in the window" if verdict_with_attempt_started(db) else "just after the window"
        return "ended first"
    if not wait(proc, lambda: any(a.outcome == bstore.STARTED for a in attempts(db))):
        return "ended first"
    delay = rng.uniform(0.0, 25.0)
    if wait(proc, lambda: False, timeout_s=delay):
        return "ended first"
    if proc.poll() is not None:
        return "ended first"
    kill_group(proc)
    return f"after {delay:.1f} s"


def counts(db: Path) -> dict[str, object]:
    with closing(sqlite3.connect(db)) as conn:
        verdicts = Counter(task for task, in conn.execute(
            "SELECT a.task_id FROM batch_attempts a JOIN events e ON e.run_id = a.run_id AND e.kind = 'verdict' "
            "GROUP BY a.run_id"))
    model = Counter(a.task_id for a in attempts(db) if a.outcome == bstore.MODEL)
    return {"runs with a verdict per task": dict(verdicts), "model outcomes per task": dict(model)}


def trial(number: int, server: FaultServer, task_ids: tuple[str, ...], rng: random.Random,
          runtime: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sweep-resume-") as where:
        tmp = Path(where)
        home, db = tmp / "home", tmp / "home" / "escrow.db"
        env = cli_env(home, ESCROW_SANDBOX_RUNTIME=runtime)
        url = f"http://127.0.0.1:{server.port}/k/{{task_id}}/v1"
        driver = start(env, "batch", str(subset_task_file(tmp, task_ids)), "--model-url", url, *COMMON)
        kills = [kill_at_random(driver, db, rng, window=number % 2 == 0)]
        with Store.open(f"sqlite:///{db}", readonly=True, create=False) as store:
            (batch_id,) = _batch_ids(store)
        time.sleep(3)  # the dead driver's leases (2 s) lapse
        first = start(env, "batch", "--resume", batch_id[:8], "--workers", "2", "--json")
        if rng.random() < 0.5:
            kills.append(kill_at_random(first, db, rng, window=rng.random() < 0.5))
            time.sleep(3)
        else:
            first.communicate(timeout=900)
        second = run_escrow(None, "batch", "--resume", batch_id[:8], "--workers", "2", "--json", env=env,
                            timeout=900)
        report = json.loads(second.stdout) if second.returncode == 0 and second.stdout.strip() else {}
        per_task = counts(db)
        run_escrow(None, "sandbox", "gc", env=env)
        verdicts = per_task["runs with a verdict per task"]
        assert isinstance(verdicts, dict)
        return {"trial": number, "kills": kills, "second resume exit": second.returncode,
                "done": report.get("done"), "n_tasks": report.get("n_tasks"),
                "tasks run twice": sorted(t for t, n in verdicts.items() if n > 1), **per_task,
                **({"said": second.stderr[-600:]} if second.returncode else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--runtime", default="runc", choices=("runc", "runsc"))
    parser.add_argument("--seed", type=int, default=43)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    task_ids = TASKS[:args.tasks]
    scripts = example_scripts(EXAMPLES)
    started = time.monotonic()
    results: list[dict[str, Any]] = []
    with FaultServer() as server:
        for task_id in task_ids:
            server.script_for(task_id, scripts[task_id], restart=True)  # each new run from the start
        for number in range(args.trials):
            results.append(trial(number, server, task_ids, rng, args.runtime))
            print(json.dumps(results[-1]), flush=True)
    twice = [t for r in results for t in r["tasks run twice"]]
    print(json.dumps({
        "trials": len(results), "tasks per trial": len(task_ids),
        "driver kills": sum(1 for r in results for k in r["kills"] if k != "ended first"),
        "kills in the verdict-committed window": sum(
            1 for r in results for k in r["kills"] if k == "in the window"),
        "tasks run twice": len(twice),
        "trials with every task one model outcome": sum(
            1 for r in results if r["model outcomes per task"] == {t: 1 for t in task_ids}),
        "trials whose last resume reported every task done": sum(
            1 for r in results if r["done"] == r["n_tasks"] == len(task_ids)),
        "seconds": round(time.monotonic() - started),
    }, indent=1))


if __name__ == "__main__":
    main()
