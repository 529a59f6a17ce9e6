"""Aggregate reports over 1,000,000 model calls (or --calls N), before and
after schema 7 (the call's model copied onto responses and attempts), in one run.

A schema-6 store of N/100 runs x 100 turns (call, response, HTTP attempt and
turn row each, hash-chained) is generated with bench/bench_store.py's
generator and cached; each run of this bench works on a copy of it:

1. before: the EXPLAIN QUERY PLAN of each aggregate query in its schema-6
   form (model from ``model_calls`` through a join) and ``report --by
   model|day`` over 7 days, 30 days and all time, best of --repeat (3);
2. ``escrow migrate`` to schema 7 (the resumable backfill and its indexes), timed;
3. after: the same plans and times with the copied model and its covering
   indexes; then the ratio before/after per query, side by side;
4. ``report RUN`` of a 100-turn run and ``verify RUN`` on the migrated store.

Usage: .venv/bin/python bench/bench_report.py [--calls 1000000] [--cache-dir /var/tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from orchestrator.launch.reports import report_run, report_runs
from policies.price_table import load_price_table
from store import Store
from store.engine import make_engine
from store.migrations import upgrade
from store.reports import query_plans

WINDOWS = (("7d", 7), ("30d", 30), ("all", None))
COPY = "gen_ai.request.model"
V7_INDEXES = ("ix_model_responses_run_model", "ix_call_attempts_run_model")


def timed(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def schema6_store(path: Path, calls: int) -> None:
    """Generate (once) a store as schema 6 wrote it: no model copies, no v7 indexes."""
    if path.exists():
        return
    os.environ["ESCROW_BENCH_RUNS"] = str(calls // 100)
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_store  # one generator for both benches

    print(f"generating {bench_store.RUNS} runs x {bench_store.CALLS_PER_RUN} calls at {path} ...", flush=True)
    started = time.perf_counter()
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    Store.open(f"sqlite:///{partial}").close()
    with closing(sqlite3.connect(partial)) as conn:
        for index in V7_INDEXES:
            conn.execute(f"DROP INDEX {index}")
        for table in ("model_responses", "call_attempts"):
            conn.execute(f'ALTER TABLE {table} DROP COLUMN "{COPY}"')
        conn.execute("DELETE FROM escrow_migrations WHERE version = 7")
        conn.commit()
    bench_store.generate(partial, copies=False)
    partial.rename(path)
    print(f"generated in {time.perf_counter() - started:.0f} s, {path.stat().st_size / 1e9:.2f} GB", flush=True)


def open_at(path: Path, version: int) -> Store:
    """A read-only Store over the file at its own schema version (the public
    open refuses a store older than this Escrow; the bench reads it as it was)."""
    url = make_url(f"sqlite:///{path}")
    return Store(str(url), make_engine(url, readonly=True), None, version)


def plans(store: Store, joined: bool) -> list[str]:
    lines = []
    for by in ("model", "day"):
        for name, steps in query_plans(store, None, None, joined=joined, by=by).items():
            if by == "day" and name in ("attempt_time", "tool_time"):
                continue  # the same query for every grouping
            lines.append(f"   {name:<12} --by {by:<5} " + "; ".join(steps))
    return lines


def times(store: Store, newest: float, joined: bool, repeat: int) -> dict[tuple[str, str], tuple[float, int]]:
    prices = load_price_table(None)
    out = {}
    for label, days in WINDOWS:
        since = None if days is None else newest - days * 86400
        for by in ("model", "day"):
            seconds, report = timed(lambda since=since, by=by: report_runs(
                store, by=by, since=since, until=None, prices=prices, joined=joined), repeat)
            out[(label, by)] = (seconds, report.total.calls if report.total else 0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--cache-dir", type=Path, default=Path("/var/tmp"))
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs of each report")
    args = parser.parse_args()
    cached = args.cache_dir / f"escrow-bench-report-s6-{args.calls}.db"
    schema6_store(cached, args.calls)
    work = args.cache_dir / f"escrow-bench-report-work-{os.getpid()}.db"
    shutil.copyfile(cached, work)
    try:
        with closing(sqlite3.connect(work)) as conn:
            runs, newest = conn.execute("SELECT count(*), max(created_at) FROM runs").fetchone()
            calls = conn.execute("SELECT count(*) FROM model_calls").fetchone()[0]
            sample = conn.execute(f"SELECT id FROM runs ORDER BY created_at LIMIT 1 OFFSET {runs // 2}").fetchone()[0]
        print(f"store: {runs} runs, {calls} model calls, {work.stat().st_size / 1e9:.2f} GB\n")

        print("1. before (schema 6: the model from model_calls, through a join)")
        with open_at(work, 6) as store:
            print("\n".join(plans(store, joined=True)))
            before = times(store, newest, joined=True, repeat=args.repeat)

        print("\n2. escrow migrate to schema 7 (copy the model onto responses and attempts, build the indexes)")
        engine = make_engine(make_url(f"sqlite:///{work}"), readonly=False, synchronous="NORMAL")
        started = time.perf_counter()
        applied = upgrade(engine, 6)
        engine.dispose()
        print(f"   applied {applied} in {time.perf_counter() - started:.1f} s")
        with closing(sqlite3.connect(work)) as conn:
            conn.execute("ANALYZE")

        print("\n3. after (schema 7: the copied model, covering indexes)")
        with Store.open(f"sqlite:///{work}", readonly=True) as store:
            print("\n".join(plans(store, joined=False)))
            after = times(store, newest, joined=False, repeat=args.repeat)
            print(f"\n   {'report':<28} {'calls':>9} {'before ms':>10} {'after ms':>10} {'ratio':>7}")
            for (label, by), (seconds, covered) in after.items():
                was, covered_before = before[(label, by)]
                assert covered == covered_before, "both forms must count the same calls"
                print(f"   --since {label:<4} --by {by:<6}       {covered:>9} {was * 1000:10.1f} {seconds * 1000:10.1f}"
                      f" {was / seconds:6.2f}x")
            worst = max(s for s, _ in after.values())
            print(f"   slowest aggregate after: {worst * 1000:.0f} ms ({'under' if worst < 1 else 'NOT under'} 1 s)")

            print("\n4. one run on the migrated store, best of 3")
            seconds, single = timed(lambda: report_run(store, sample, load_price_table(None)))
            print(f"   report RUN ({len(single.turns)} turns)  {seconds * 1000:8.1f} ms")
            seconds, check = timed(lambda: store.verify(sample))
            print(f"   verify RUN ({check.rows} rows, ok={check.ok})  {seconds * 1000:8.1f} ms")
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{work}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
