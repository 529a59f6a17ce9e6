"""Ray compared with the local pool: the same example tasks, the same paced
fault server and the same PostgreSQL store, run once by each executor side by
side in this one run. Printed per executor: wall time, wall time per task,
the mean attempt time as recorded in the store (inside the worker), passes;
and the ratios Ray / local, with Ray's overhead per task in seconds.

    .venv/bin/python bench/bench_ray.py [--tasks 4] [--workers 4] [--tokens-per-s 20] [--address HOST:PORT]

Without --address a throwaway two-node Ray cluster is started here (and
stopped after), as the tests start one; PostgreSQL likewise. Needs dockerd and
the sandbox image (the runs are real, in sandboxes).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' throwaway Ray cluster and PostgreSQL

from orchestrator.adapters.fault_server import FaultServer  # noqa: E402
from orchestrator.composition.batch.driver import BatchPlan, start_batch  # noqa: E402
from orchestrator.composition.batch.pool import PoolOptions, run_pool  # noqa: E402
from orchestrator.composition.batch.ray_executor import run_ray  # noqa: E402
from orchestrator.composition.batch.scripted import example_scripts  # noqa: E402
from orchestrator.composition.batch.tasks import load_task_file  # noqa: E402
from orchestrator.settings import DEFAULT_SANDBOX_IMAGE, load_settings  # noqa: E402
from store import Store  # noqa: E402
from store.write import batches as bstore  # noqa: E402
from tests.batch.pg_server import PostgresServer  # noqa: E402
from tests.batch.ray_cluster import RayCluster  # noqa: E402

EXAMPLES = ROOT / "examples" / "tasks"


def one_executor(execute: Callable[..., list], store: Store, server: FaultServer, settings, n_tasks: int,
                 workers: int, tokens_per_s: float, **extra: str) -> tuple[float, float, int]:
    """Wall seconds, mean attempt seconds, passes."""
    task_file = load_task_file(EXAMPLES / "tasks.jsonl")
    chosen = task_file.model_copy(update={"tasks": task_file.tasks[:n_tasks]})
    scripts = example_scripts(EXAMPLES, tokens_per_s=tokens_per_s)
    for task in chosen.tasks:
        server.script_for(task.id, scripts[task.id])
    url = f"http://127.0.0.1:{server.port}/k/{{task_id}}/v1"
    options = PoolOptions(workers=workers, start_slots=2)
    batch_id = start_batch(store, chosen, BatchPlan(tasks_dir=str(EXAMPLES), model_urls=(url,), options=options))
    started = time.monotonic()
    results = execute(store, settings, batch_id, list(chosen.tasks), tasks_dir=EXAMPLES, model_urls=[url],
                      options=options, **extra)
    wall = time.monotonic() - started
    view = bstore.load_batch(store, batch_id)
    assert view is not None
    spans = [a.finished_at - a.started_at for a in view.attempts if a.finished_at is not None]
    return wall, sum(spans) / max(len(spans), 1), sum(r.verdict == "PASS" for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--workers", type=int, default=4, help="runs at once, for both executors")
    parser.add_argument("--tokens-per-s", type=float, default=20.0)
    parser.add_argument("--address", help="an existing Ray cluster (default: start a two-node one here)")
    parser.add_argument("--image", default=DEFAULT_SANDBOX_IMAGE)
    args = parser.parse_args()
    cluster = None if args.address else RayCluster(head_cpus=2, worker_cpus=2).start()
    postgres = PostgresServer().create()
    try:
        address = args.address or cluster.address  # type: ignore[union-attr]
        with tempfile.TemporaryDirectory() as home, FaultServer() as server, Store.open(postgres.url) as store:
            settings = load_settings(None, home=Path(home), sandbox_image=args.image, context_window=8192,
                                     tokenizer="cl100k_base", model="fault-model", max_turns=6, db_url=postgres.url)
            rows = {"local": one_executor(run_pool, store, server, settings, args.tasks, args.workers,
                                          args.tokens_per_s),
                    "ray": one_executor(run_ray, store, server, settings, args.tasks, args.workers,
                                        args.tokens_per_s, address=address)}
    finally:
        postgres.destroy()
        if cluster is not None:
            cluster.stop()
    n = args.tasks
    print(f"{n} example tasks, {args.workers} at once, replies paced at {args.tokens_per_s} chunks/s, "
          f"store on PostgreSQL")
    print(f"{'executor':>8} {'wall s':>8} {'wall s/task':>12} {'attempt s':>10} {'passed':>7} {'wall ratio':>11}")
    base = rows["local"][0]
    for name, (wall, attempt_s, passed) in rows.items():
        print(f"{name:>8} {wall:>8.1f} {wall / n:>12.2f} {attempt_s:>10.2f} {passed:>7} {wall / base:>10.2f}x")
    (lw, la, lp), (rw, ra, rp) = rows["local"], rows["ray"]
    print(f"Ray overhead per task: {(rw - lw) / n:+.2f} s of wall time, {ra - la:+.2f} s inside the attempt "
          f"(ratio {ra / la:.2f}x); same passes: {'yes' if lp == rp else 'NO'} ({lp} vs {rp})")


if __name__ == "__main__":
    main()
