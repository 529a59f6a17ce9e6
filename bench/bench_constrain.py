"""Constrained tool calls against unconstrained ones, side by side in one run:
the example tasks (examples/tasks) on the real Gemma 3 270M, with
``--constrain tools`` and ``--constrain off``, on the llama-cpp-python server
the demo uses and on llama.cpp's own llama-server (started here on a free
port). The arms take turns task by task (``escrow batch`` of one task into
its own store; which arm goes first alternates), so that a machine whose load
drifts loads both alike, and the figures so far are printed to stderr after
each task (a run cut short still says what ran). Per arm: answers
rejected at parse per 100 model calls, turns that ran a tool, completion
tokens per executed call, model seconds per turn, verdicts, and answers
recorded as not honouring the constraint.

    .venv/bin/python bench/bench_constrain.py [--tasks 13] [--max-turns 6] [--deadline-s 120] \\
        [--servers llama-cpp-python,llama-server] [--model-url URL] [--keep DIR] [--json]

Needs dockerd, the sandbox image, and the servers (scripts/setup.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.llama_server

from orchestrator.grammar import NOT_HONOURED  # noqa: E402
from store import Store  # noqa: E402
from tests.llama_server import GEMMA_CHAT, available, llama_server  # noqa: E402

TASKS = ROOT / "examples" / "tasks" / "tasks.jsonl"
ESCROW = str(Path(sys.executable).with_name("escrow"))
ARMS = ("tools", "off")


def run_arm(url: str, arm: str, tasks: Path, work: Path, max_turns: int, deadline_s: float) -> tuple[Path, float]:
    db = work / f"{arm}-{tasks.stem}.db"
    flags = ["--workers", "1", "--tool-protocol", "text", "--system-role", "user", "--context-window", "8192",
             "--no-stream", "--max-tokens", "256", "--max-turns", str(max_turns), "--model", "gemma-3-270m",
             "--model-url", f"{url}/v1", "--constrain", arm, "--db", str(db), "--json"]
    env = {**os.environ, "ESCROW_HOME": str(work / "home"), "ESCROW_DEADLINE_S": str(deadline_s)}
    started = time.monotonic()
    done = subprocess.run([ESCROW, "batch", str(tasks), *flags], env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"escrow batch ({arm}) exited {done.returncode}: {done.stderr[-2000:]}")
    return db, time.monotonic() - started


def figures(dbs: list[Path]) -> dict[str, object]:
    calls = parse_rejected = turns = tool_turns = executed = completion = not_honoured = 0
    model_s: list[float] = []
    verdicts: Counter[str] = Counter()
    for db in dbs:
        with Store.open(f"sqlite:///{db}", readonly=True) as store:
            for summary in store.runs():
                trajectory = store.trajectory(summary.run.id)
                verdicts[summary.run.verdict or "-"] += 1
                for record in trajectory.turns:
                    turns += 1
                    calls += len(record.calls)
                    for call in record.calls:
                        if call.response is not None:
                            completion += call.response.output_tokens or 0
                            if call.response.total_s is not None:
                                model_s.append(call.response.total_s)
                    ran = [c for c in record.candidates if c.state == "COMMITTED"]
                    executed += len(ran)
                    tool_turns += bool(ran)
                    parse_rejected += sum(1 for c in record.candidates
                                          if c.state == "REJECTED" and c.transitions[-1].layer == "parse")
                    not_honoured += sum(1 for e in record.events if e.kind == NOT_HONOURED)
    return {
        "runs": sum(verdicts.values()), "turns": turns, "calls": calls,
        "parse_rejected_per_100": round(100 * parse_rejected / calls, 1) if calls else None,
        "parse_rejected": parse_rejected, "turns_ran_tool": tool_turns, "executed_calls": executed,
        "tokens_per_executed_call": round(completion / executed, 1) if executed else None,
        "model_s_per_turn": round(statistics.mean(model_s), 2) if model_s else None,
        "model_s_per_output_token": round(sum(model_s) / completion, 3) if completion else None,
        "not_honoured": not_honoured, "verdicts": dict(sorted(verdicts.items())),
    }


def shown(value: object) -> str:
    return "-" if value is None else str(value)


def table(server: str, arms: dict[str, dict[str, object]]) -> list[str]:
    rows = [("parse rejections / 100 calls", "parse_rejected_per_100"), ("model calls", "calls"),
            ("turns that ran a tool", "turns_ran_tool"), ("turns", "turns"),
            ("tokens per executed call", "tokens_per_executed_call"), ("model s per turn", "model_s_per_turn"),
            ("model s per output token", "model_s_per_output_token"),
            ("not honoured", "not_honoured")]
    lines = [f"{server}", f"  {'':30} {'tools':>12} {'off':>12}"]
    for label, key in rows:
        lines.append(f"  {label:30} {shown(arms['tools'][key]):>12} {shown(arms['off'][key]):>12}")
    on, off = arms["tools"]["model_s_per_turn"], arms["off"]["model_s_per_turn"]
    if isinstance(on, float) and isinstance(off, float) and off:
        lines.append(f"  {'time per turn, tools / off':30} {on / off:>12.2f}")
    for arm in ARMS:
        seen = arms[arm]["verdicts"]
        verdicts = ", ".join(f"{k} {v}" for k, v in seen.items()) if isinstance(seen, dict) else "-"
        lines.append(f"  verdicts ({arm}): {verdicts}")
    return lines


def interleaved(url: str, server: str, files: list[Path], work: Path,
                args: argparse.Namespace) -> dict[str, dict[str, object]]:
    """Both arms, task by task, the first arm alternating; the figures so far
    on stderr after each task."""
    dbs: dict[str, list[Path]] = {arm: [] for arm in ARMS}
    arms: dict[str, dict[str, object]] = {}
    for i, task in enumerate(files):
        for arm in ARMS if i % 2 == 0 else ARMS[::-1]:
            dbs[arm].append(run_arm(url, arm, task, work, args.max_turns, args.deadline_s)[0])
        arms = {arm: figures(dbs[arm]) for arm in ARMS}
        print(f"after {i + 1} task(s), {time.strftime('%H:%M:%S')}", *table(server, arms), sep="\n",
              file=sys.stderr, flush=True)
    return arms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=13, help="The first N example tasks (13: all).")
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--deadline-s", type=float, default=120.0,
                        help="T_max per call (a loaded machine decodes slowly: raise it for both arms alike).")
    parser.add_argument("--servers", default="llama-cpp-python,llama-server")
    parser.add_argument("--model-url", default=os.environ.get("ESCROW_TEST_LLAMA_URL", "http://127.0.0.1:8088"),
                        help="The llama-cpp-python server's root URL.")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    parser.add_argument("--keep", type=Path, help="Work (and keep the arms' stores) in this new directory.")
    args = parser.parse_args()
    out: dict[str, dict[str, dict[str, object]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-constrain-") as tmp:
        work = Path(tmp) if args.keep is None else args.keep
        work.mkdir(parents=True, exist_ok=args.keep is None)
        rows = TASKS.read_text().splitlines()[:args.tasks]
        # The batch resolves each row's repo beside its task file.
        files = []
        for row in rows:
            task_id = json.loads(row)["instance_id"]
            (work / task_id).symlink_to(TASKS.parent / task_id)
            files.append(work / f"task-{task_id}.jsonl")
            files[-1].write_text(row + "\n")
        for server in args.servers.split(","):
            if server == "llama-server":
                if not available():
                    print("llama-server: not built (scripts/setup.sh escrow_setup_llama_server); skipped",
                          file=sys.stderr)
                    continue
                with llama_server(work / "llama-server.log", context=8192, extra=GEMMA_CHAT) as url:
                    out[server] = interleaved(url, server, files, work / server, args)
            else:
                out[server] = interleaved(args.model_url, server, files, work / server, args)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{args.tasks} task(s), at most {args.max_turns} turns each, T_max {args.deadline_s:g} s, "
          "Gemma 3 270M, text protocol")
    for server, arms in out.items():
        print("\n".join(table(server, arms)))


if __name__ == "__main__":
    main()
