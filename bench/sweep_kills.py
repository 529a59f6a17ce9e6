"""SIGKILL sweep of real ``escrow run`` processes (issue 43's closing figures).

Each kill is a fresh store and a real ``escrow run`` of examples/calculator
against the scripted fault server, its sandbox under the runtime asked for,
SIGKILLed in one phase:

  model call     the server holds the answer (the run waits on it)
  tool command   the sandbox runs ``sleep 61``
  verification   the verifier runs ``sleep 62``
  turn end       a turn's tool done, the store held so the turn cannot end
                 nor the next call start (the kill lands between turns)
  write          inside a write transaction: a hook on the store's writer
                 SIGKILLs the process just before its Nth commit (N random
                 over a fixing run's commits)

Before the kill it reads the store's committed turns (what a reader was
acknowledged); after it: committed turns lost, whether the run reads
``crashed`` once its lease lapsed, ``verify RUN``'s exit, and the offline
replay's exit (9: the recording ends where the run died; 1: a divergence,
false here since nothing changed). The phases and the waits are
tests/e2e/test_killed_runs.py's.

Usage: PYTHONPATH=. .venv/bin/python bench/sweep_kills.py [--per-phase 5] [--writes 10]
       [--runtime runc|runsc] [--seed 43]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

import docker
import docker.errors
from typer.testing import CliRunner

from cli.main import app
from orchestrator.adapters.fault_server import FaultServer
from orchestrator.exit_codes import ExitCode
from tests.conftest import SANDBOX_IMAGE
from tests.e2e.test_killed_runs import (
    PHASES,
    RUN_FLAGS,
    VERIFY,
    Phase,
    escrow,
    example_repo,
    home_for,
    listed,
    reach,
    remove_sandboxes,
    store_url,
)
from tests.e2e.test_run_faults import EDIT, SUBMIT, TEST
from tests.processes import IN_PROCESS, start_escrow
from tests.replay.test_killed_run import tool

READ = tool("read_file", path="calc.py")

# The CLI with a hook on its store's writer: just before commit N (counted
# from the store's opening), the committed turns are written to ACK (what a
# reader saw acknowledged), then the process SIGKILLs itself, mid-transaction.
# N = 0 counts the commits and prints the count at exit.
WRITE_KILL = """
import atexit, json, os, signal, sqlite3, sys
from sqlalchemy import event
from store import Store
kill_at, ack, db = int(os.environ["BENCH_KILL_AT"]), os.environ["BENCH_ACK"], os.environ["BENCH_DB"]
commits = [0]
def counted(conn):
    commits[0] += 1
    if commits[0] == kill_at:
        with sqlite3.connect(db) as read:
            turns = read.execute("SELECT run_id, turn FROM turns").fetchall()
        with open(ack, "w") as out:
            json.dump(turns, out)
        os.kill(os.getpid(), signal.SIGKILL)
opened = Store.open.__func__
def open_hooked(cls, *args, **kw):
    store = opened(cls, *args, **kw)
    if store._writer is not None:
        event.listen(store._writer, "commit", counted)
    return store
Store.open = classmethod(open_hooked)
atexit.register(lambda: print("commits", commits[0], file=sys.stderr))
from cli.main import main
main()
"""


def committed_turns(tmp: Path) -> set[tuple[str, int]]:
    path = tmp / "home" / "escrow.db"
    if not path.exists():
        return set()
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        try:
            return {(r, t) for r, t in conn.execute("SELECT run_id, turn FROM turns")}
        except sqlite3.OperationalError:  # killed before the schema was made
            return set()


def env_for(tmp: Path, runtime: str) -> dict[str, str]:
    env = home_for(tmp, SANDBOX_IMAGE)
    env["ESCROW_SANDBOX_RUNTIME"] = runtime
    return env


def start(tmp: Path, server: FaultServer, runtime: str, verify: str,
          entry: tuple[str, ...] = IN_PROCESS, **extra: str) -> subprocess.Popen[str]:
    env = {**env_for(tmp, runtime), **extra}
    if entry == IN_PROCESS:
        return escrow(env, "run", "fix mean()", "--repo", str(example_repo(tmp)), "--verify", verify,
                      "--model-url", server.base_url, *RUN_FLAGS)
    return start_escrow(None, "run", "fix mean()", "--repo", str(example_repo(tmp)), "--verify", verify,
                        "--model-url", server.base_url, *RUN_FLAGS, env=env, entry=entry, merge_stderr=True)


def remove(client: docker.DockerClient, run_ids: list[str]) -> None:
    """The killed runs' sandboxes removed (one whose removal is already under way, by its own reaper, is left)."""
    try:
        remove_sandboxes(client, run_ids)
    except docker.errors.APIError as exc:
        if exc.status_code != 409:
            raise


def invoke(tmp: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*args, "--db", store_url(tmp)])
    return result.exit_code, result.output


def after_kill(tmp: Path, acknowledged: set[tuple[str, int]], client: docker.DockerClient,
               lease_wait_s: float = 60) -> dict[str, object]:
    """What the killed run left: turns lost, its status once the lease lapsed, verify's and replay's exits."""
    lost = sorted(acknowledged - committed_turns(tmp))
    runs = listed(tmp) if (tmp / "home" / "escrow.db").exists() else []
    out: dict[str, object] = {"acknowledged": len(acknowledged), "lost": len(lost), "runs": len(runs)}
    if not runs:
        return out
    run_id = str(runs[0]["id"])
    try:
        deadline = time.monotonic() + lease_wait_s
        while (status := listed(tmp)[0]["status"]) == "running" and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        remove(client, [run_id])
    out["status"] = status
    out["verify"], _ = invoke(tmp, "verify", run_id)
    out["replay"], text = invoke(tmp, "replay", run_id, "--no-record")
    if out["replay"] not in (ExitCode.REPLAY_RECORDING_ENDS, ExitCode.OK):
        out["replay_said"] = text[-400:]
    return out


def kill_in_phase(name: str, phase: Phase, server: FaultServer, client: docker.DockerClient,
                  runtime: str, before: int) -> dict[str, object]:
    """``before``: turns the run takes (reading a file) before the phase, so there are turns to lose."""
    with tempfile.TemporaryDirectory(prefix="sweep-kill-") as where:
        tmp = Path(where)
        server.reset()
        server.script([READ] * before + list(phase.script))
        proc = start(tmp, server, runtime, phase.verify)
        with reach(phase, proc, server, client, tmp, calls_before=before, own_sandbox=True):
            acknowledged = committed_turns(tmp)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        return {"phase": name, "turns_before": before, **after_kill(tmp, acknowledged, client)}


def fixing_run_commits(server: FaultServer, client: docker.DockerClient, runtime: str) -> int:
    with tempfile.TemporaryDirectory(prefix="sweep-count-") as where:
        tmp = Path(where)
        server.reset()
        server.script([EDIT, TEST, SUBMIT])
        proc = start(tmp, server, runtime, VERIFY, entry=(sys.executable, "-c", WRITE_KILL), BENCH_KILL_AT="0",
                     BENCH_ACK=str(tmp / "ack.json"), BENCH_DB=str(tmp / "home" / "escrow.db"))
        output, _ = proc.communicate(timeout=600)
        remove(client, [str(r["id"]) for r in listed(tmp)])
        counts = [line.split()[1] for line in output.splitlines() if line.startswith("commits ")]
        assert proc.returncode == 0 and counts, output[-2000:]
        return int(counts[-1])


def kill_in_write(kill_at: int, server: FaultServer, client: docker.DockerClient, runtime: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="sweep-write-") as where:
        tmp = Path(where)
        server.reset()
        server.script([EDIT, TEST, SUBMIT])
        ack = tmp / "ack.json"
        proc = start(tmp, server, runtime, VERIFY, entry=(sys.executable, "-c", WRITE_KILL),
                     BENCH_KILL_AT=str(kill_at), BENCH_ACK=str(ack), BENCH_DB=str(tmp / "home" / "escrow.db"))
        output, _ = proc.communicate(timeout=600)
        if proc.returncode != -signal.SIGKILL:
            return {"phase": f"write {kill_at}", "not_killed": proc.returncode, "said": output[-400:]}
        acknowledged = {(r, t) for r, t in json.loads(ack.read_text())}
        return {"phase": f"write {kill_at}", **after_kill(tmp, acknowledged, client)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-phase", type=int, default=5, help="kills in each of the four phases")
    parser.add_argument("--writes", type=int, default=10, help="kills inside a write transaction")
    parser.add_argument("--runtime", default="runc", choices=("runc", "runsc"))
    parser.add_argument("--seed", type=int, default=43)
    args = parser.parse_args()
    client = docker.from_env(timeout=60)
    rng = random.Random(args.seed)
    results: list[dict[str, object]] = []
    started = time.monotonic()
    with FaultServer() as server:
        for name, phase in PHASES.items():
            for _ in range(args.per_phase):
                results.append(kill_in_phase(name, phase, server, client, args.runtime, rng.randrange(3)))
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        if args.writes:
            total = fixing_run_commits(server, client, args.runtime)
            # From the second commit: the first creates the run (killed there, there is none).
            points = sorted(rng.sample(range(2, total + 1), min(args.writes, total - 1)))
            print(f"a fixing run makes {total} commits; killing before {points}", file=sys.stderr, flush=True)
            for kill_at in points:
                results.append(kill_in_write(kill_at, server, client, args.runtime))
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    killed = [r for r in results if "not_killed" not in r]
    with_run = [r for r in killed if r.get("runs")]
    summary = {
        "runtime": args.runtime,
        "kills": len(killed),
        "in a write transaction": sum(1 for r in killed if str(r["phase"]).startswith("write")),
        "by phase": dict(Counter(str(r["phase"]).split()[0] for r in killed)),
        "turns acknowledged before the kill": sum(int(str(r["acknowledged"])) for r in killed),
        "committed turns lost": sum(int(str(r["lost"])) for r in killed),
        "runs recorded": len(with_run),
        "verify clean": f"{sum(1 for r in with_run if r['verify'] == 0)} of {len(with_run)}",
        "read crashed after the lease": f"{sum(1 for r in with_run if r['status'] == 'crashed')} of {len(with_run)}",
        "replay exit 9 (recording ends)": sum(1 for r in with_run if r["replay"] == ExitCode.REPLAY_RECORDING_ENDS),
        "false divergences": sum(1 for r in with_run if r["replay"] == ExitCode.FINDING),
        "other replay exits": [r for r in with_run if r["replay"] not in (ExitCode.REPLAY_RECORDING_ENDS,
                                                                            ExitCode.FINDING)],
        "not killed (ran to the end)": [r for r in results if "not_killed" in r],
        "seconds": round(time.monotonic() - started),
    }
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("COLUMNS", "80")
    main()
