"""Sticky compared with round-robin placement over two llama.cpp replicas:
the prompt-processing time of a 10-run batch, measured side by side in one run.

Replicas: two of llama.cpp's own ``llama-server`` (the binary scripts/setup.sh
builds, Gemma 3 270M GGUF), started here on free ports, one thread each (the
machine's two cores, one a replica). The server reports per response
``timings.prompt_n`` (prompt tokens it evaluated), ``timings.cache_n`` (prompt
tokens it reused from the slot's KV cache) and ``timings.prompt_ms``.

Configuration, and why it is the one a real fleet has:
- ``--parallel S`` with S = ceil(runs / 2): as many slots as the runs sticky
  placement puts on a replica, and the batch's runs all in flight at once
  (one worker a run). A slot keeps its last prompt's KV cache, so with
  affinity every run's prefix stays warm in its own slot.
- ``--cache-ram 0``: no host-memory prompt cache behind the slots. A
  replica's cache is then its KV cache only, as a real server's is sized:
  for the runs it serves, not for the whole fleet's. Without affinity every
  replica would need every run's prefix, twice the slots it has; with
  affinity each keeps only its own runs'.
- ``--swa-full``: a full-size cache for Gemma 3's sliding-window layers, so
  any common prefix is reusable, also one that diverges mid-prompt. Without
  it llama.cpp can reuse little after a divergence, which would only hurt
  round-robin; this keeps the comparison conservative.
- ``--ctx-size S * slot_ctx``: each slot holds a whole trajectory's prompt.
- ``id_slot`` on every request: each run is pinned to one slot of the
  replica it lands on. Left to itself, this llama-server build sends a
  request to the slot whose cached prompt shares the longest prefix with it,
  and waits for that slot when it is busy; with a system prompt shared by
  every run that is one slot for all of a replica's runs, one request at a
  time, each evicting the last (seen in the server log: only slot 1 used).
  Sticky: the runs on a replica take its slots 0..S-1. Round-robin: run r
  keeps slot r // 2 on both replicas, the best a balancer without affinity
  can do with S slots for 2S runs: runs 2k and 2k+1 take turns in slot k.
- ``--threads-http S + 2``: every slot's request is read at once.

The batch: --runs trajectories of --turns turns, rendered by ContextAssembler
as a run's requests are: the same system prompt for every run (Escrow's own),
each run its task, then per turn the assistant's step and a tool output of
--observation-lines lines of a file unique to the run (3 lines and the step:
about 160 prompt tokens a turn). Each
request asks for one output token (``max_tokens=1``), so a request's time is
prompt processing.

  sticky       each run gets a replica from the batch's ReplicaPool (least
               loaded: 5 and 5) and keeps it for its whole trajectory
  round-robin  a run's requests alternate between the replicas (request k of
               run r goes to replica (r + k) mod 2), as a load balancer
               without affinity spreads one client's requests

Each arm starts fresh replicas, so nothing is cached from the other arm.
Printed per arm: the batch's wall time (all of it prompt processing), the
summed server ``prompt_ms``, prompt tokens evaluated and reused, and the
round-robin / sticky ratios.

    .venv/bin/python bench/bench_placement.py [--runs 10] [--turns 8] [--observation-lines 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.llama_server
from orchestrator.composition.batch.placement import ReplicaPool  # noqa: E402
from orchestrator.context import Budget, ContextAssembler, TiktokenCounter  # noqa: E402
from orchestrator.contract import Message  # noqa: E402
from orchestrator.runspec import SYSTEM_PROMPT  # noqa: E402
from tests.llama_server import available, llama_server  # noqa: E402

REPLICAS = 2


def observation(run: int, turn: int, count: int) -> str:
    """A tool output unique to the run: a numbered excerpt of one of its files."""
    lines = [f"{n:>4}  def check_{run}_{turn}_{n}(value): return value * {n + run} - {turn}"
             for n in range(1, count + 1)]
    return f"$ sed -n 1,{len(lines)}p src/pkg{run}/mod{turn}.py\n" + "\n".join(lines)


def requests_of(run: int, turns: int, slot_ctx: int, observation_lines: int) -> list[dict]:
    ctx = ContextAssembler(system=SYSTEM_PROMPT, task=f"Task {run}: make tests/test_pkg{run}.py pass.", tools=(),
                           budget=Budget(s_max=slot_ctx, k_max=8), counter=TiktokenCounter("cl100k_base"),
                           system_role="user")
    bodies = []
    for turn in range(turns):
        if turn:
            ctx.append([
                Message(role="assistant", content=f"Step {turn}: read src/pkg{run}/mod{turn}.py."),
                Message(role="user", content=observation(run, turn, observation_lines)),
            ], turn=turn, elidable=[False, False])
        rendered = ctx.render(turn=turn, turns_left=None)
        body = rendered.build_request(model="gemma-3-270m", stream=False, max_tokens=1).wire_body()
        bodies.append(body | {"temperature": 0.0})
    return bodies


def one_arm(urls: list[str], runs: list[list[dict]], sticky: bool) -> dict[str, float]:
    pool, lock = ReplicaPool(urls), threading.Lock()
    out = {"prompt_ms": 0.0, "evaluated": 0, "reused": 0, "requests": 0, "switches": 0}
    failures: list[BaseException] = []
    # Sticky: the pool places the runs in order (least loaded: 5 and 5), each run its own slot there.
    # Round-robin has no home; run r keeps slot r // 2 on both replicas, so each slot serves two runs.
    homes = [pool.acquire() if sticky else None for _ in runs]
    slots = [homes[:index].count(home) if sticky else index // len(urls) for index, home in enumerate(homes)]

    def run(index: int) -> None:
        try:
            with httpx.Client(timeout=1800) as http:
                mine = homes[index]
                previous = None
                for turn, body in enumerate(runs[index]):
                    url = mine or urls[(index + turn) % len(urls)]
                    response = http.post(f"{url}/v1/chat/completions", json=body | {"id_slot": slots[index]})
                    response.raise_for_status()
                    timings = response.json()["timings"]
                    with lock:
                        out["prompt_ms"] += timings["prompt_ms"]
                        out["evaluated"] += timings["prompt_n"]
                        out["reused"] += timings["cache_n"]
                        out["requests"] += 1
                        out["switches"] += previous is not None and url != previous
                    previous = url
        except BaseException as exc:  # reported after the join: a failed arm must not print a ratio
            failures.append(exc)

    started = time.perf_counter()
    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(runs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(f"{len(failures)} run(s) failed: {failures[0]!r}")
    out["wall"] = time.perf_counter() - started
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--observation-lines", type=int, default=3)
    parser.add_argument("--slot-ctx", type=int, default=4096)
    parser.add_argument("--logs", type=Path, help="keep the replicas' logs in this folder")
    args = parser.parse_args()
    if not available():
        raise SystemExit("llama-server or the Gemma GGUF is missing: run scripts/setup.sh escrow_setup_llama_server")
    slots = -(-args.runs // REPLICAS)
    runs = [requests_of(r, args.turns, args.slot_ctx, args.observation_lines) for r in range(args.runs)]
    flags = ("--cache-ram", "0", "--swa-full", "--threads-http", str(slots + 2))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        for name, sticky in (("sticky", True), ("round-robin", False)):
            with ExitStack() as replicas:  # fresh replicas per arm: nothing cached from the other arm
                urls = [replicas.enter_context(llama_server(
                    logs / f"{name}-{i}.log", context=slots * args.slot_ctx, parallel=slots, threads=1,
                    extra=flags)) for i in range(REPLICAS)]
                results[name] = one_arm(urls, runs, sticky)
    print(f"{args.runs} runs x {args.turns} turns (all runs at once), a {args.observation_lines}-line file excerpt "
          f"a turn; {REPLICAS} llama-server replicas (Gemma 3 270M, 1 thread, {slots} slots, "
          f"{' '.join(flags)}); 1 output token a request")
    print(f"{'placement':<12} {'batch wall s':>12} {'prompt_ms sum s':>16} {'tokens evaluated':>17} "
          f"{'tokens reused':>14} {'requests':>9} {'replica switches':>17}")
    for name, r in results.items():
        print(f"{name:<12} {r['wall']:>12.1f} {r['prompt_ms'] / 1000:>16.1f} {r['evaluated']:>17,} "
              f"{r['reused']:>14,} {r['requests']:>9} {r['switches']:>17}")
    rr, st = results["round-robin"], results["sticky"]
    print(f"round-robin / sticky: batch prompt-processing (wall) {rr['wall'] / st['wall']:.2f}x, "
          f"summed prompt_ms {rr['prompt_ms'] / st['prompt_ms']:.2f}x, "
          f"tokens evaluated {rr['evaluated'] / st['evaluated']:.2f}x")


if __name__ == "__main__":
    main()
