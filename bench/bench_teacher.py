"""Teacher scoring throughput against the teacher's own prefill rate (issue 45).

A store of ``--runs`` token-exact runs of ``--turns`` calls each (recorded
through the real Recorder by ``bench_tokens.record``: each prompt the last
prompt + its sampled ids + what the template and a tool add) is scored by a
simulated vLLM teacher: the fault server, in its own process, answering
``/v1/completions`` with ``prompt_logprobs`` one entry per id, after reading
every prompt in flight at RATE ids/s in all (``Reply.prefill_ids_per_s``).
Per rate, alternating the arms within each round:

(a) the teacher's own rate: the same request bodies ``escrow score`` sends,
    straight to the server with ``--parallel`` in flight (httpx, the answer
    read, not parsed);
(b) ``escrow score`` over the same runs, the whole command as a user runs
    it (a subprocess, on a fresh copy of the store: engine found from the
    server's endpoints, vocabulary check, scoring, figures printed);
(c) scoring alone: ``score_runs`` in this process, timed around it.

Each figure is ids prefilled per second; the ratios (b)/(a) and (c)/(a) are
printed per rate (the median over ``--rounds``), with the CPU seconds (c)
spent: ids a CPU-second is the rate past which scoring itself bounds the
command on one core, whatever the teacher. The claim: (c)/(a) >= 0.8 with
8 in flight. ``--profile FILE`` writes a cProfile of the whole command
at the highest rate (``python -m pstats FILE``).

    .venv/bin/python bench/bench_teacher.py [--rates 25000 50000 200000] [--runs 32] [--turns 8]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from bench_tokens import record  # noqa: E402  (the token-exact runs bench_tokens times)

from cli.score_cmd import score_runs  # noqa: E402
from orchestrator.adapters.fault_server import FaultServer, Reply  # noqa: E402
from orchestrator.adapters.model_client.teacher_scoring import TeacherClient  # noqa: E402
from store import Store  # noqa: E402

TEACHER_MODEL = "teacher"
ESCROW = str(Path(sys.executable).parent / "escrow")  # the console script a user runs


def serve(rate: float | None, pipe: Connection) -> None:
    """A fault server posing as vLLM (``/version``), scoring at ``rate`` ids/s
    (None: a student, for its tokenizer); sends its URL, then serves until told."""
    with FaultServer(endpoints={"/version": {"version": "0.11.0"}}) as server:
        server.script([Reply(prefill_ids_per_s=rate)], cycle=True)
        pipe.send(server.base_url)
        pipe.recv()


class Served:
    """A server in its own process, so that its JSON work does not share this process's GIL with the arms."""

    def __init__(self, rate: float | None) -> None:
        self._pipe, theirs = multiprocessing.Pipe()
        self._process = multiprocessing.Process(target=serve, args=(rate, theirs), daemon=True)

    def __enter__(self) -> str:
        self._process.start()
        url: str = self._pipe.recv()
        return url

    def __exit__(self, *exc: object) -> None:
        self._pipe.send("stop")
        self._process.join(timeout=10)


def make_store(path: Path, runs: int, turns: int, added: int, sampled: int) -> tuple[list[str], list[dict[str, Any]]]:
    """The runs, and the request body escrow score sends for each of their calls."""
    with Store.open(f"sqlite:///{path}") as store:
        run_ids = [record(store, turns, added, sampled) for _ in range(runs)]
        bodies = [{"model": TEACHER_MODEL, "prompt": [*(e.prompt_token_ids or ()), *(e.completion_token_ids or ())],
                   "max_tokens": 1, "prompt_logprobs": 1, "temperature": 0.0}
                  for run_id in run_ids for _, _, e in store.answered_envelopes(run_id)]
    return run_ids, bodies


def direct(url: str, bodies: list[dict[str, Any]], parallel: int) -> float:
    """(a): seconds to send every body straight to the teacher, ``parallel`` in flight."""
    with httpx.Client(timeout=300.0, limits=httpx.Limits(max_connections=parallel)) as http:
        def send(body: dict[str, Any]) -> int:
            response = http.post(url + "/completions", json=body)
            response.raise_for_status()
            return len(response.content)

        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            list(pool.map(send, bodies))
        return time.perf_counter() - started


def command(db: Path, run_ids: list[str], teacher: str, student: str, parallel: int,
            profile: Path | None = None) -> float:
    """(b): seconds the whole ``escrow score`` took, as a user runs it."""
    prefix = [sys.executable, "-m", "cProfile", "-o", str(profile), ESCROW] if profile else [ESCROW]
    args = [*prefix, "score", *run_ids, "--teacher-url", teacher, "--teacher-model", TEACHER_MODEL,
            "--student-url", student, "--parallel", str(parallel), "--db", f"sqlite:///{db}"]
    started = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env=os.environ.copy(), check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or f"run {run_ids[-1][:8]}: " not in done.stdout:
        raise SystemExit(f"escrow score failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return elapsed


def scoring_alone(db: Path, run_ids: list[str], teacher: str, parallel: int) -> tuple[float, float]:
    """(c): seconds ``score_runs`` took, the store open and the teacher known,
    and the CPU seconds this process spent on it (every thread: the answers'
    reading, checking and writing), which bound it on a faster teacher."""
    with Store.open(f"sqlite:///{db}", create=False) as store, \
            TeacherClient(teacher, TEACHER_MODEL, "vllm") as client:
        started, cpu = time.perf_counter(), time.process_time()
        results = score_runs(store, client, run_ids, parallel)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    if any(refused for _, refused, _ in results.values()):
        raise SystemExit(f"scoring refused calls: {results}")
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", type=float, nargs="+", default=[25000.0, 50000.0, 200000.0],
                        help="the teacher's prefill rate, ids/s")
    parser.add_argument("--runs", type=int, default=32)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--added", type=int, default=200, help="ids the template and a tool add a turn")
    parser.add_argument("--sampled", type=int, default=100, help="ids sampled a turn")
    parser.add_argument("--parallel", type=int, default=8, help="sequences in flight, every arm")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile", type=Path, help="cProfile the whole command at the highest rate into this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        pristine = Path(folder) / "pristine.db"
        run_ids, bodies = make_store(pristine, args.runs, args.turns, args.added, args.sampled)
        ids = sum(len(b["prompt"]) for b in bodies)
        print(f"{len(run_ids)} runs, {len(bodies)} calls, {ids:,} ids to prefill, {args.parallel} in flight")

        def fresh() -> Path:
            copy = Path(folder) / "scored.db"
            shutil.copyfile(pristine, copy)
            return copy

        with Served(None) as student:
            for rate in args.rates:
                with Served(rate) as teacher:
                    times: dict[str, list[float]] = {"a": [], "b": [], "c": [], "cpu": []}
                    for _ in range(args.rounds):
                        times["a"].append(direct(teacher, bodies, args.parallel))
                        times["b"].append(command(fresh(), run_ids, teacher, student, args.parallel))
                        alone, cpu = scoring_alone(fresh(), run_ids, teacher, args.parallel)
                        times["c"].append(alone)
                        times["cpu"].append(cpu)
                    a, b, c, cpu = (statistics.median(times[arm]) for arm in ("a", "b", "c", "cpu"))
                    print(f"rate {rate:>9,.0f} ids/s: (a) teacher {ids / a:>9,.0f} ids/s ({a:.2f} s)   "
                          f"(b) escrow score {ids / b:>9,.0f} ids/s ({b:.2f} s)   (c) scoring alone "
                          f"{ids / c:>9,.0f} ids/s ({c:.2f} s)   (b)/(a) {a / b:.2f}   (c)/(a) {a / c:.2f}   "
                          f"(c) CPU {cpu:.2f} s: {ids / cpu:,.0f} ids a CPU-second")
                    if args.profile and rate == max(args.rates):
                        command(fresh(), run_ids, teacher, student, args.parallel, profile=args.profile)
                        print(f"profile of the whole command at {rate:,.0f} ids/s: {args.profile}")


if __name__ == "__main__":
    main()
