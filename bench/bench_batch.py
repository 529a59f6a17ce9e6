"""Batch throughput: the same example tasks run with 1 worker and with N
workers, against the fault server paced so runs are model-bound (each reply
streams at --tokens-per-s). Printed: wall time and tasks per minute for each
pool size, and the speed-up ratio measured side by side in this one run.

    .venv/bin/python bench/bench_batch.py [--workers 1 4] [--tasks 8] [--tokens-per-s 20]

Needs dockerd and the sandbox image (the runs are real, in sandboxes).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from orchestrator.batch.driver import BatchPlan, run_batch, start_batch
from orchestrator.batch.pool import PoolOptions
from orchestrator.batch.scripted import example_scripts
from orchestrator.batch.tasks import load_task_file
from orchestrator.fault_server import FaultServer
from orchestrator.settings import load_settings
from store import Store

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tasks"


def one_pool(workers: int, n_tasks: int, tokens_per_s: float, image: str) -> tuple[float, int]:
    task_file = load_task_file(EXAMPLES / "tasks.jsonl")
    chosen = task_file.model_copy(update={"tasks": task_file.tasks[:n_tasks]})
    scripts = example_scripts(EXAMPLES, tokens_per_s=tokens_per_s)
    with tempfile.TemporaryDirectory() as home, FaultServer() as server:
        for task in chosen.tasks:
            server.script_for(task.id, scripts[task.id])
        settings = load_settings(None, home=Path(home), sandbox_image=image, context_window=8192,
                                 tokenizer="cl100k_base", model="fault-model", max_turns=6)
        url = f"http://127.0.0.1:{server.port}/k/{{task_id}}/v1"
        with Store.open(settings.store_url) as store:
            plan = BatchPlan(tasks_dir=str(EXAMPLES), model_urls=(url,),
                             options=PoolOptions(workers=workers, start_slots=2))
            batch_id = start_batch(store, chosen, plan)
            started = time.monotonic()
            results = run_batch(store, settings, batch_id)
            wall = time.monotonic() - started
    return wall, sum(r.verdict == "PASS" for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--tokens-per-s", type=float, default=20.0)
    parser.add_argument("--image", default="escrow-sandbox:bookworm-1")
    args = parser.parse_args()
    walls = {}
    print(f"{args.tasks} example tasks, replies paced at {args.tokens_per_s} chunks/s")
    print(f"{'workers':>8} {'wall s':>8} {'tasks/min':>10} {'passed':>7} {'speed-up':>9}")
    for workers in args.workers:
        wall, passed = one_pool(workers, args.tasks, args.tokens_per_s, args.image)
        walls[workers] = wall
        base = walls[args.workers[0]]
        print(f"{workers:>8} {wall:>8.1f} {args.tasks / wall * 60:>10.1f} {passed:>7} {base / wall:>8.2f}x")


if __name__ == "__main__":
    main()
