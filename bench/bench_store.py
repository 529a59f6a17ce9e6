"""Trajectory store: recording latency and query times.

1. Recording latency per turn (write-ahead request commit + the turn's
   transaction) through the real Recorder, at synchronous=FULL and NORMAL
   side by side, p50 and p99.
2. ``escrow runs`` / ``escrow show`` / ``escrow verify`` on a generated store
   of 10,000 runs and 1,000,000 model calls (100 turns a run, each with its
   call, response and turn row, all hash-chained). The store is generated with
   bulk inserts and cached at --cache; query plans are printed to show every
   query is index-driven. Times are in-process (Store API + rendering) and
   as a real ``escrow`` subprocess (adds interpreter start-up).

Usage: .venv/bin/python bench/bench_store.py [--turns 300] [--cache /var/tmp/escrow-bench.db]
"""

from __future__ import annotations

import argparse
import io
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

from rich.console import Console

from cli.display.show import print_trajectory
from cli.runs_cmd import runs_table
from orchestrator.canonical import canonical_json
from orchestrator.contract import Message, ModelRequest
from orchestrator.envelope import Envelope, Status, Usage
from store import Recorder, Store
from store.chain import genesis, link
from store.read.run_list import RunLine
from store.write import synthetic
from store.write.rows import new_run_id

ROWS_PER_TURN = 4
RUNS, CALLS_PER_RUN, MODELS = (
    int(__import__("os").environ.get("ESCROW_BENCH_RUNS", "10000")),
    100,
    ("gemma-3-270m", "qwen2.5-coder-7b", "llama-3.1-8b"),
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def recording_latency(modes: tuple[str, ...], turns: int, folder: Path) -> dict[str, list[float]]:
    """Record into one store per mode, alternating turn by turn so that load
    from elsewhere on the machine hits every mode alike."""
    stores = {m: Store.open(f"sqlite:///{folder / f'{m}.db'}", synchronous=m) for m in modes}
    try:
        recorders = {m: Recorder(s) for m, s in stores.items()}
        rngs = {m: random.Random(1) for m in modes}
        runs = {m: synthetic.start(recorders[m], rngs[m]) for m in modes}
        histories: dict[str, list] = {m: [] for m in modes}
        samples: dict[str, list[float]] = {m: [] for m in modes}
        for turn in range(turns):
            for m in modes:
                if turn % 20 == 0:  # keep requests realistic in size, not ever-growing
                    histories[m].clear()
                started = time.perf_counter()
                synthetic.record_turn(recorders[m], runs[m], turn, histories[m], rngs[m])
                samples[m].append(time.perf_counter() - started)
    finally:
        for store in stores.values():
            store.close()
    return samples


def template_rows(path: Path) -> dict[str, dict]:
    """One real row of each table, recorded through the Recorder, as templates."""
    with Store.open(f"sqlite:///{path}") as store:
        run_id = synthetic.record_run(Recorder(store), turns=1, seed=3)
    with closing(sqlite3.connect(path)) as conn:
        conn.row_factory = sqlite3.Row
        out = {t: dict(conn.execute(f"SELECT * FROM {t} WHERE run_id = ? LIMIT 1", (run_id,)).fetchone())
               for t in ("model_calls", "model_responses", "call_attempts", "turns")}
        out["runs"] = dict(conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone())
        out["events"] = dict(
            conn.execute("SELECT * FROM events WHERE run_id = ? AND kind = 'verdict'", (run_id,)).fetchone()
        )
        # Compact payloads keep the generated file near 1 GB; real requests carry the whole history.
        small = ModelRequest(
            model=MODELS[0], messages=(Message(role="user", content="fix the failing test"),), max_tokens=256
        )
        envelope = Envelope(
            status=Status.COMPLETED, finish_reason="stop", usage=Usage(prompt_tokens=900, completion_tokens=50)
        )
        out["model_calls"].update(request_json=small.canonical(), request_sha256=small.sha256(),
                                  request_body=None, request_refs=None, request_hashed_as=None)  # inline text
        out["model_responses"].update(envelope_json=envelope.model_dump_json(), n_attempts=0)
        out["turns"].update(messages_json="[]", n_rows=1)
        out["call_attempts"].update(number=1, status="COMPLETED", http_status=200, duration_s=0.4, backoff_s=0.0)
        for table in ("call_attempts", "tool_executions", "escrow_transitions", "candidates", "events",
                      "model_responses", "turns", "model_calls", "runs"):
            conn.execute(f"DELETE FROM {table}")
        conn.commit()
    return out


COPY = "gen_ai.request.model"  # the call's model copied onto responses and attempts (schema 7)


def generate(path: Path, *, copies: bool = True) -> None:
    """10,000 runs x 100 turns, each turn a call, its response, its HTTP
    attempt and the turn row. ``copies=False`` writes the rows of a schema-6
    store (no model copies; the caller has dropped those columns)."""
    with tempfile.TemporaryDirectory() as tmp:  # not in ``path``: its schema is the caller's
        templates = template_rows(Path(tmp) / "templates.db")
    if not copies:
        for table in ("model_responses", "call_attempts"):
            templates[table].pop(COPY, None)
    rng = random.Random(7)
    start = time.time() - 90 * 86400
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA synchronous = OFF")
        tables = {t: list(row) for t, row in templates.items()}
        inserts = {
            t: f"INSERT INTO {t} ({', '.join(chr(34) + c + chr(34) for c in cols)}) "
            f"VALUES ({', '.join('?' * len(cols))})"
            for t, cols in tables.items()
        }
        for r in range(RUNS):
            created = start + r * (90 * 86400 / RUNS)
            run = {
                **templates["runs"],
                "id": new_run_id(),
                "created_at": created,
                "finished_at": created + 600,
                "gen_ai.request.model": MODELS[r % len(MODELS)],
                "task": f"task {r}",
                "verdict": rng.choice(("PASS", "BUDGET_EXHAUSTED", "FAULTED")),
                "verdict_detail": "generated",
                "status": "finished",
            }
            batch: dict[str, list] = {"model_calls": [], "model_responses": [], "call_attempts": [], "turns": []}
            head = genesis(run)
            model = {COPY: run[COPY]}
            for turn in range(CALLS_PER_RUN):
                call_id = f"{r:06d}{turn:04d}c{rng.getrandbits(64):016x}"
                for order, (table, extra) in enumerate(
                    (
                        ("model_calls", {"id": call_id, "created_at": created + turn, **model}),
                        (
                            "model_responses",
                            {
                                "id": call_id + "r",
                                "call_id": call_id,
                                "recorded_at": created + turn + 0.5,
                                "gen_ai.usage.input_tokens": 900 + 150 * turn,
                                "gen_ai.usage.output_tokens": rng.randrange(20, 200),
                                "n_attempts": 1,
                                **(model if copies else {}),
                            },
                        ),
                        ("call_attempts", {"id": call_id + "a", "call_id": call_id, **(model if copies else {})}),
                        ("turns", {"id": call_id + "t", "committed_at": created + turn + 0.9}),
                    )
                ):
                    row = {
                        **templates[table],
                        **extra,
                        "run_id": run["id"],
                        "turn": turn,
                        "seq": ROWS_PER_TURN * turn + order + 1,
                    }
                    row["chain_hash"] = head = link(head, table, row)
                    batch[table].append(tuple(row[c] for c in tables[table]))
            verdict = {
                **templates["events"],
                "id": run["id"][:20] + "verdict",
                "run_id": run["id"],
                "turn": CALLS_PER_RUN,
                "seq": ROWS_PER_TURN * CALLS_PER_RUN + 1,
                "at": run["finished_at"],
                "data_json": canonical_json({"verdict": run["verdict"], "detail": run["verdict_detail"]}),
            }
            verdict["chain_hash"] = head = link(head, "events", verdict)
            conn.execute(inserts["events"], tuple(verdict[c] for c in tables["events"]))
            run.update(chain_seq=ROWS_PER_TURN * CALLS_PER_RUN + 1, chain_head=head)
            conn.execute(inserts["runs"], tuple(run[c] for c in tables["runs"]))
            for table, rows in batch.items():
                conn.executemany(inserts[table], rows)
            if r % 500 == 499:
                conn.commit()
                print(f"  generated {r + 1} runs", file=sys.stderr)
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("ANALYZE")


def show_text(trajectory) -> str:
    """What ``escrow show RUN --full`` prints, at 80 columns."""
    out = io.StringIO()
    print_trajectory(Console(file=out, width=80), trajectory, full=True)
    return out.getvalue()


def timed(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def cli_time(args: list[str], url: str) -> float:
    escrow = str(Path(sys.executable).with_name("escrow"))
    return timed(lambda: subprocess.run([escrow, *args, "--db", url], check=True, capture_output=True), repeat=3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300, help="turns recorded per synchronous mode")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "escrow-bench-store.db")
    args = parser.parse_args()

    print(f"1. recording latency per turn ({args.turns} turns, request commit + turn transaction)")
    with tempfile.TemporaryDirectory() as tmp:
        results = recording_latency(("FULL", "NORMAL"), args.turns, Path(tmp))
    for mode, samples in results.items():
        print(
            f"   synchronous={mode:<6}  p50 {percentile(samples, 0.5) * 1000:7.2f} ms   p99 "
            f"{percentile(samples, 0.99) * 1000:7.2f} ms"
            f"   mean {statistics.mean(samples) * 1000:7.2f} ms"
        )
    full, normal = results["FULL"], results["NORMAL"]
    print(
        f"   FULL/NORMAL ratio: p50 {percentile(full, 0.5) / percentile(normal, 0.5):.2f}x, p99 "
        f"{percentile(full, 0.99) / percentile(normal, 0.99):.2f}x"
    )

    url = f"sqlite:///{args.cache}"
    if not args.cache.exists():
        print(f"\n   generating {RUNS} runs / {RUNS * CALLS_PER_RUN} calls at {args.cache} (cached for later runs)")
        started = time.perf_counter()
        Store.open(url).close()
        generate(args.cache)
        print(f"   generated in {time.perf_counter() - started:.0f} s, {args.cache.stat().st_size / 1e6:.0f} MB")
    with Store.open(url, readonly=True) as store, store.read() as conn:
        calls = conn.exec_driver_sql("SELECT count(*) FROM model_calls").scalar()
        runs = int(conn.exec_driver_sql("SELECT count(*) FROM runs").scalar() or 0)
        sample = str(conn.exec_driver_sql(f"SELECT id FROM runs ORDER BY created_at LIMIT 1 OFFSET {runs // 2}")
                     .scalar())
        print(f"\n2. store of {runs} runs and {calls} model calls ({args.cache.stat().st_size / 1e6:.0f} MB)")
        for name, sql in (
            ("runs", "SELECT * FROM runs ORDER BY created_at DESC LIMIT 50"),
            (
                "runs --model",
                "SELECT * FROM runs WHERE \"gen_ai.request.model\" = 'x' ORDER BY created_at DESC LIMIT 50",
            ),
            ("totals", "SELECT run_id, sum(cost_usd) FROM model_responses WHERE run_id IN ('a') GROUP BY run_id"),
            ("show", "SELECT * FROM model_calls WHERE run_id = 'a' ORDER BY seq"),
        ):
            plan = "; ".join(str(r[-1]) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
            print(f"   plan {name:<13} {plan}")
    with Store.open(url, readonly=True) as store:
        cases = {
            "runs (50 newest)": lambda: runs_table([RunLine.of(r) for r in store.runs()], now=time.time()),
            "runs --model": lambda: runs_table([RunLine.of(r) for r in store.runs(model=MODELS[1])],
                                                now=time.time()),
            "runs --verdict --since 7d": lambda: runs_table(
                [RunLine.of(r) for r in store.runs(verdict="PASS", since=time.time() - 7 * 86400)], now=time.time()),
            "show RUN (100 turns)": lambda: show_text(store.trajectory(sample[:12])),
            "verify RUN (401 rows)": lambda: store.verify(sample),
        }
        print(f"\n   {'query':<28} {'in-process':>11}")
        for name, fn in cases.items():
            print(f"   {name:<28} {timed(fn) * 1000:9.1f} ms")
    print("\n   real command (includes interpreter start-up):")
    baseline = timed(
        lambda: subprocess.run(
            [str(Path(sys.executable).with_name("escrow")), "--version"], check=True, capture_output=True
        ),
        repeat=3,
    )
    print(f"   escrow --version          {baseline * 1000:9.0f} ms (start-up alone)")
    for label, cmd in (
        ("escrow runs", ["runs"]),
        ("escrow show RUN", ["show", sample[:12]]),
        ("escrow verify RUN", ["verify", sample]),
    ):
        print(f"   {label:<25} {cli_time(cmd, url) * 1000:9.0f} ms")


if __name__ == "__main__":
    main()
