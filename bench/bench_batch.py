"""Batch throughput: the same example tasks run with 1 worker and with N
workers, against the fault server paced so runs are model-bound like real
ones. Printed: wall time and tasks per minute for each pool size, and the
speed-up ratio measured side by side in this one run.

Each task's script: --explore-turns turns reading the file to fix (as an
agent looks before it edits), then its known fix (1 or 2 write_file calls and
submit). The pacing of every reply: the headers wait --ttft-s (prompt
processing), then --reasoning-tokens of reasoning and the tool call's
arguments stream at --tokens-per-s (one 4-character chunk a token). The
defaults, 1.5 s and 150 tokens at 30 tokens/s, are a mid-size model on one
GPU: 6.5 s and more a turn, of which the orchestrator spends little.

Why this pacing is model-bound, as real runs are: a real agent turn spends
seconds in the model (time to first token for a prompt of thousands of
tokens, then a few hundred tokens decoded) and well under a second in the
orchestrator and a tool call (a file read). The fault server streams every
connection at the same rate however many are open, as an inference server
with batch capacity to spare does, so N workers get N streams and the model
side scales; what does not is what the machine itself does per run (sandbox
start, docker exec, the verifier), measured apart in the phase columns:
median seconds a run spends queued (for a worker, a start slot, the repo
copy), starting its sandbox, in model calls, in tools, in the verifier
(submit), and in the orchestrator's own work (rest).

    .venv/bin/python bench/bench_batch.py [--workers 1 8] [--tasks 13] [--tokens-per-s 30]

Needs dockerd and the sandbox image (the runs are real, in sandboxes).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from orchestrator.adapters.fault_server import FaultServer, Reply, ScriptedToolCall
from orchestrator.composition.batch.driver import BatchPlan, run_batch, start_batch
from orchestrator.composition.batch.pool import PoolOptions
from orchestrator.composition.batch.scripted import example_scripts, fixed_files
from orchestrator.composition.batch.tasks import load_task_file
from orchestrator.settings import DEFAULT_SANDBOX_IMAGE, load_settings
from store import Store

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tasks"


def paced_scripts(tokens_per_s: float, ttft_s: float, reasoning_tokens: int, explore: int) -> dict[str, list]:
    """Each task's reads and fix, every reply paced as the module docstring says."""
    pace = {"delay_s": ttft_s, "reasoning": "tok " * reasoning_tokens, "chunk_chars": 4}
    scripts = {}
    for task, steps in example_scripts(EXAMPLES, tokens_per_s=tokens_per_s).items():
        target = next(iter(fixed_files(EXAMPLES / task)))
        read = Reply(tool_calls=(ScriptedToolCall(name="read_file", arguments=json.dumps({"path": target})),),
                     tokens_per_s=tokens_per_s)
        scripts[task] = [step.model_copy(update=pace) for step in [read] * explore + steps]
    return scripts


PHASES = ("queued", "start", "model", "tools", "verify", "rest")


def timeline(db: Path, run_ids: list[str], t0: float) -> dict[str, float]:
    """Median seconds a run spends in each phase, read from the store: queued
    (batch start to the run recorded: a free worker, a start slot, the repo
    copied), start (to the sandbox up: the run's engine event), model (its
    calls' total time), tools and verify (submit runs the verifier), rest (the
    orchestrator's own work: context, recording, parsing). Also "turn": a
    run's time from its sandbox up to its end over its model calls."""
    with sqlite3.connect(db) as con:
        phases: dict[str, list[float]] = {name: [] for name in (*PHASES, "turn")}
        for run_id in run_ids:
            created, finished = con.execute("select created_at, finished_at from runs where id = ?",
                                            (run_id,)).fetchone()
            (up,) = con.execute("select min(at) from events where run_id = ? and kind = 'engine'",
                                (run_id,)).fetchone()
            (model,) = con.execute("select coalesce(sum(total_s), 0) from model_responses where run_id = ?",
                                   (run_id,)).fetchone()
            tools = dict(con.execute(
                "select \"gen_ai.tool.name\" = 'submit', coalesce(sum(duration_s), 0) from tool_executions "
                "where run_id = ? group by 1", (run_id,)).fetchall())
            spent = {"queued": created - t0, "start": up - created, "model": model, "tools": tools.get(0, 0.0),
                     "verify": tools.get(1, 0.0)}
            spent["rest"] = finished - up - model - spent["tools"] - spent["verify"]
            (calls,) = con.execute("select count(*) from model_responses where run_id = ?", (run_id,)).fetchone()
            spent["turn"] = (finished - up) / max(calls, 1)
            for name in phases:
                phases[name].append(spent[name])
    return {name: statistics.median(values) for name, values in phases.items()}


def one_pool(workers: int, n_tasks: int, scripts: dict[str, list], image: str,
             runtime: str = "runc") -> tuple[float, list, dict]:
    task_file = load_task_file(EXAMPLES / "tasks.jsonl")
    chosen = task_file.model_copy(update={"tasks": task_file.tasks[:n_tasks]})
    with tempfile.TemporaryDirectory() as home, FaultServer() as server:
        for task in chosen.tasks:
            server.script_for(task.id, scripts[task.id])
        settings = load_settings(None, home=Path(home), sandbox_image=image, context_window=8192,
                                 tokenizer="cl100k_base", model="fault-model", max_turns=30, sandbox_runtime=runtime)
        url = f"http://127.0.0.1:{server.port}/k/{{task_id}}/v1"
        with Store.open(settings.store_url) as store:
            plan = BatchPlan(tasks_dir=str(EXAMPLES), model_urls=(url,),
                             options=PoolOptions(workers=workers, start_slots=2, infra_retries=0))
            batch_id = start_batch(store, chosen, plan)
            started, t0 = time.monotonic(), time.time()
            results = run_batch(store, settings, batch_id)
            wall = time.monotonic() - started
        phases = timeline(Path(home) / "escrow.db", [r.run_id for r in results if r.run_id], t0)
    return wall, results, phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tasks", type=int, default=13)
    parser.add_argument("--tokens-per-s", type=float, default=30.0)
    parser.add_argument("--ttft-s", type=float, default=1.5, help="Stall before each reply (prompt processing).")
    parser.add_argument("--reasoning-tokens", type=int, default=150, help="Reasoning streamed before each call.")
    parser.add_argument("--explore-turns", type=int, default=4, help="Turns reading the file before the fix.")
    parser.add_argument("--image", default=DEFAULT_SANDBOX_IMAGE)
    args = parser.parse_args()
    walls = {}
    scripts = paced_scripts(args.tokens_per_s, args.ttft_s, args.reasoning_tokens, args.explore_turns)
    print(f"{args.tasks} example tasks, {args.explore_turns} reads then the fix; each reply: {args.ttft_s:g} s to "
          f"first token, then {args.reasoning_tokens} reasoning tokens and the call at {args.tokens_per_s:g} tokens/s")
    print(f"{'workers':>8} {'wall s':>8} {'tasks/min':>10} {'passed':>7} {'speed-up':>9}   median s a run: "
          + " ".join(f"{name:>7}" for name in PHASES))
    for workers in args.workers:
        wall, results, phases = one_pool(workers, args.tasks, scripts, args.image)
        passed = sum(r.verdict == "PASS" for r in results)
        walls[workers] = wall
        base = walls[args.workers[0]]
        print(f"{workers:>8} {wall:>8.1f} {args.tasks / wall * 60:>10.1f} {passed:>7} {base / wall:>8.2f}x   "
              f"{'':>15}" + " ".join(f"{phases[name]:>7.1f}" for name in PHASES))
        for r in results:
            if r.verdict != "PASS":
                print(f"         not passed: {r.task_id} {r.outcome} {r.verdict} {r.error or ''}")


if __name__ == "__main__":
    main()
