"""Orchestrator overhead per turn with 32 runs at once, compared with one run
alone, measured side by side in this one run.

Each run is the live loop of bench/bench_loop.py (the same RunSpec, context,
perimeter, SQLite journal and Docker sandbox as ``escrow run``), against one
fault-server process streaming a ~100-token reply with one read_file call per
turn at --tokens-per-s. The concurrent runs share one store file, as a batch's
runs do; each has its own sandbox, model client and recorder, on its own
thread (the local pool's shape). Overhead per turn = turn wall time - model
time (the envelope's total_s) - tool time (the exec's duration_s).

    .venv/bin/python bench/bench_batch_overhead.py [--runs 32] [--turns 8] [--tokens-per-s 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_loop import IMAGE, Clock, live_loop, reply, start_server, timed_step  # noqa: E402

from sandbox import connect, require_image  # noqa: E402
from store import Recorder, Store  # noqa: E402


def one_run(store: Store, url: str, turns: int, ready: threading.Barrier, out: list[dict[str, float]]) -> None:
    with live_loop(connect(None), store, url, turns, Clock()) as (agent, tools, model, _, run_id):
        ready.wait()  # every sandbox is up: only the turns are timed, all at once
        for _ in range(turns):
            wall, envelope, tool_s = timed_step(agent, tools, model)
            model_s = envelope.timings.total_s
            out.append({"wall": wall, "model": model_s, "tool": tool_s, "overhead": wall - model_s - tool_s})
        Recorder(store).finish_run(run_id, "CANCELED", "bench")


def measure(runs: int, turns: int, url: str, home: Path) -> list[dict[str, float]]:
    rows: list[dict[str, float]] = []
    ready = threading.Barrier(runs, timeout=900)  # a run that failed to start breaks it, not hangs it
    with Store.open(f"sqlite:///{home / f'escrow-{runs}.db'}") as store:
        threads = [threading.Thread(target=one_run, args=(store, url, turns, ready, rows)) for _ in range(runs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(rows) == runs * turns, f"{len(rows)} of {runs * turns} turns measured"
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=32)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--tokens-per-s", type=float, default=50.0)
    args = parser.parse_args()
    require_image(connect(None), IMAGE)
    server, url = start_server(reply(args.tokens, args.tokens_per_s, "read_file"))
    try:
        with tempfile.TemporaryDirectory() as home:
            results = {n: measure(n, args.turns, url, Path(home)) for n in (1, args.runs)}
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(f"{args.turns} turns a run, {args.tokens} tokens a reply at {args.tokens_per_s:g} tokens/s, one read_file "
          f"a turn; {args.runs} runs at once vs one alone")
    print(f"{'runs':>5} {'turns':>6} {'wall ms':>9} {'model ms':>9} {'tool ms':>8} {'overhead ms':>12} "
          f"{'p95 ovh ms':>11} {'overhead share':>15}")
    base: float | None = None
    for n, rows in results.items():
        med = {k: 1000 * statistics.median(r[k] for r in rows) for k in rows[0]}
        p95 = 1000 * sorted(r["overhead"] for r in rows)[int(0.95 * (len(rows) - 1))]
        share = sum(r["overhead"] for r in rows) / sum(r["wall"] for r in rows)
        base = base or med["overhead"]
        print(f"{n:>5} {len(rows):>6} {med['wall']:>9.1f} {med['model']:>9.1f} {med['tool']:>8.1f} "
              f"{med['overhead']:>12.1f} {p95:>11.1f} {100 * share:>14.1f}%")
    assert base is not None
    print(f"median overhead per turn, {args.runs} at once / one alone: {med['overhead'] / base:.2f}x")


if __name__ == "__main__":
    main()
