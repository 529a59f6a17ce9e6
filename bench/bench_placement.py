"""Sticky compared with round-robin placement over two llama.cpp replicas:
the prompt-processing time of a 10-run batch, measured side by side in one run.

Two llama-cpp-python servers (the cached venv and Gemma 3 270M GGUF, as
scripts/setup.sh starts the shared one; one thread each, on their own ports,
started and stopped here) are the replicas. A batch of --runs trajectories,
each --turns turns long and rendered by ContextAssembler as a real run's requests are
(a stable prefix that grows each turn; every run its own task text), is
replayed by --workers workers, one run at a time each:

  sticky       each run gets a replica from the batch's ReplicaPool (least
               loaded) and keeps it for its whole trajectory
  round-robin  a run's requests alternate between the replicas, as a
               load balancer without affinity spreads one client's requests
               (a global request counter shared by the workers can fall
               into step with them and stay on one replica by chance: with
               2 workers it switched only 2 of 12 times)

Each request asks for one output token, so its time is essentially prompt
processing. llama-cpp-python keeps one prefix (the previous request's) per
server, so --workers equal to the number of replicas is the shape in which
stickiness can keep every cache warm. Printed: total prompt-processing time
per arm, requests that landed on another replica than the run's previous
one, prompt tokens, and the ratio.

    .venv/bin/python bench/bench_placement.py [--runs 10] [--turns 8] [--ports 8091 8092]
"""

from __future__ import annotations

import argparse
import queue
import subprocess
import threading
import time
import uuid
from pathlib import Path

import httpx

from orchestrator.batch.placement import ReplicaPool
from orchestrator.context import Budget, ContextAssembler, TiktokenCounter
from orchestrator.contract import Message

LLAMA_VENV = Path("/var/cache/escrow/llama-venv")
MODEL = Path("/var/cache/escrow/models/gemma-3-270m-q4_k_m.gguf")
PREAMBLE = ("You are a coding agent in a sandboxed copy of a Python repository. Each turn, propose one "
            "shell command, read its output, and continue until the test suite passes. ") * 4


def start_replicas(ports: list[int], n_ctx: int) -> list[subprocess.Popen]:
    procs = [subprocess.Popen(
        [str(LLAMA_VENV / "bin/python"), "-m", "llama_cpp.server", "--model", str(MODEL), "--model_alias",
         "gemma-3-270m", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", "1",
         "--chat_format", "gemma", "--verbose", "False", "--interrupt_requests", "False"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for port in ports]
    for port in ports:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"llama.cpp replica on port {port} did not start")
            time.sleep(1)
    return procs


def requests_of(run: int, turns: int, n_ctx: int, nonce: str) -> list[dict]:
    ctx = ContextAssembler(system=f"Session {nonce}-{run}.\n{PREAMBLE}", task=f"Make test suite {run} pass.", tools=(),
                  budget=Budget(s_max=n_ctx, k_max=8), counter=TiktokenCounter("cl100k_base"), system_role="user")
    bodies = []
    for turn in range(turns):
        if turn:
            ctx.append([
                Message(role="assistant", content=f"Step {turn}: run `pytest -x tests/test_mod{turn}.py`."),
                Message(role="user", content=f"tests/test_mod{turn}.py::test_parse FAILED: expected {turn * 17} "
                                             f"got {turn * 17 + 1}; src/mod{turn}.py line {turn * 3} returns raw"),
            ], turn=turn, elidable=[False, True])
        rendered = ctx.render(turn=turn, turns_left=turns - turn)
        bodies.append(rendered.build_request(model="gemma-3-270m", stream=False, max_tokens=1).wire_body())
    return bodies


def one_arm(urls: list[str], runs: list[list[dict]], workers: int, sticky: bool) -> dict[str, float]:
    todo: queue.Queue[int] = queue.Queue()
    for index in range(len(runs)):
        todo.put(index)
    pool, lock = ReplicaPool(urls), threading.Lock()
    out = {"seconds": 0.0, "switches": 0, "prompt_tokens": 0, "requests": 0}

    def worker() -> None:
        with httpx.Client(timeout=600) as http:
            while True:
                try:
                    index = todo.get_nowait()
                except queue.Empty:
                    return
                mine = pool.acquire() if sticky else None
                previous = None
                for turn, body in enumerate(runs[index]):
                    url = mine or urls[(index + turn) % len(urls)]
                    started = time.perf_counter()
                    response = http.post(f"{url}/v1/chat/completions", json=body)
                    spent = time.perf_counter() - started
                    response.raise_for_status()
                    with lock:
                        out["seconds"] += spent
                        out["requests"] += 1
                        out["switches"] += previous is not None and url != previous
                        out["prompt_tokens"] += (response.json().get("usage") or {}).get("prompt_tokens", 0)
                    previous = url
                if mine:
                    pool.release(mine)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out["wall"] = time.perf_counter() - started
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ports", type=int, nargs=2, default=[8091, 8092])
    parser.add_argument("--n-ctx", type=int, default=8192)
    args = parser.parse_args()
    procs = start_replicas(args.ports, args.n_ctx)
    try:
        urls = [f"http://127.0.0.1:{port}" for port in args.ports]
        results = {}
        for name, sticky in (("sticky", True), ("round-robin", False)):
            nonce = uuid.uuid4().hex[:10]  # each arm its own prompts: nothing cached from the other arm
            runs = [requests_of(r, args.turns, args.n_ctx, nonce) for r in range(args.runs)]
            results[name] = one_arm(urls, runs, args.workers, sticky)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
    print(f"{args.runs} runs x {args.turns} turns, {args.workers} workers, 2 llama.cpp replicas (Gemma 3 270M, "
          f"1 thread each), 1 output token a request")
    print(f"{'placement':<12} {'prompt-proc s':>14} {'wall s':>8} {'requests':>9} {'replica switches':>17} "
          f"{'prompt tokens':>14}")
    for name, r in results.items():
        print(f"{name:<12} {r['seconds']:>14.1f} {r['wall']:>8.1f} {r['requests']:>9} {r['switches']:>17} "
              f"{r['prompt_tokens']:>14,}")
    print(f"prompt-processing time, round-robin / sticky: "
          f"{results['round-robin']['seconds'] / results['sticky']['seconds']:.2f}x")


if __name__ == "__main__":
    main()
