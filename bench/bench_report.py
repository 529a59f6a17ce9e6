"""Aggregate reports over 1,000,000 model calls (or --calls N), before and
after schema 8 (per-run totals written when a run finishes), in one run.

A schema-7 store of N/100 finished runs x 100 turns (call, response, HTTP
attempt and turn row each, hash-chained) is generated with
bench/bench_store.py's generator and cached. Each response gets a TTFT that
grows with its prompt (prefill) with some noise, hashed into its chain like
any other cell, so the TTFT histograms hold what a real run's would. Each
run of this bench works on a copy of the cached store:

1. before: ``report --by model|day`` over 7 days, 30 days and all time
   through the schema-7 queries as released (store/reports/aggregate_query.py
   at SCHEMA7_REV, read from git), and through this version's row path
   (``raw``: every run summed from its rows, as a run without totals is
   read), with the row path's EXPLAIN QUERY PLAN; best of --repeat-before (1);
2. ``escrow migrate`` to schema 8 (the resumable backfill of the totals), timed;
3. after: the plan of the totals query and the same reports from the
   totals, best of --repeat (3); the ratio before/after side by side, and
   whether every report is identical both ways;
4. the rows each side reads: responses, attempts and tool rows against
   totals rows, and the TTFT histogram entries.

Usage: .venv/bin/python bench/bench_report.py [--calls 1000000] [--cache-dir /var/tmp]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
import types
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from orchestrator.costing.aggregate import aggregate
from orchestrator.launch.reports import report_runs
from policies.price_table import load_price_table
from store import Store
from store.engine import make_engine
from store.migrations import upgrade
from store.reports import query_plans

ROOT = Path(__file__).resolve().parents[1]
SCHEMA7_REV = "14a009a"  # the last commit whose report queries summed every run's rows
WINDOWS = (("7d", 7), ("30d", 30), ("all", None))
BYS = ("model", "day")


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def with_ttfts(link: Callable[..., str]) -> Callable[..., str]:
    """The generator's ``link``, giving each response a TTFT before it is
    hashed: 30 ms plus 15-30 us a prompt token (prefill), so a run's TTFTs
    spread over about three octaves as its context grows."""
    rng = random.Random(11)

    def linked(head: str, table: str, row: dict[str, Any]) -> str:
        if table == "model_responses":
            row["ttft_s"] = round(0.03 + row["gen_ai.usage.input_tokens"] * rng.uniform(1.5e-5, 3e-5), 6)
        return link(head, table, row)

    return linked


def schema7_store(path: Path, calls: int) -> None:
    """Generate (once) a store as schema 7 wrote it: no totals table, no stamp 8."""
    if path.exists():
        return
    os.environ["ESCROW_BENCH_RUNS"] = str(calls // 100)
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_store  # one generator for both benches

    bench_store.link = with_ttfts(bench_store.link)
    print(f"generating {bench_store.RUNS} runs x {bench_store.CALLS_PER_RUN} calls at {path} ...", flush=True)
    started = time.perf_counter()
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    Store.open(f"sqlite:///{partial}").close()
    with closing(sqlite3.connect(partial)) as conn:
        conn.execute("DROP TABLE run_totals")
        conn.execute("DROP TABLE run_ttfts")
        conn.execute("DELETE FROM escrow_migrations WHERE version = 8")
        conn.commit()
    bench_store.generate(partial)
    partial.rename(path)
    print(f"generated in {time.perf_counter() - started:.0f} s, {path.stat().st_size / 1e9:.2f} GB", flush=True)


def open_at(path: Path, version: int) -> Store:
    """A read-only Store over the file at its own schema version (the public
    open refuses a store older than this Escrow; the bench reads it as it was)."""
    url = make_url(f"sqlite:///{path}")
    return Store(str(url), make_engine(url, readonly=True), None, version)


def plans(store: Store, raw: bool) -> list[str]:
    return [f"   {name:<9} " + "; ".join(steps) for name, steps in query_plans(store, None, None, raw=raw).items()]


def times(store: Store, newest: float, raw: bool, repeat: int) -> dict[tuple[str, str], tuple[float, Any]]:
    prices = load_price_table(None)
    out = {}
    for label, days in WINDOWS:
        since = None if days is None else newest - days * 86400
        for by in BYS:
            out[(label, by)] = timed(lambda since=since, by=by: report_runs(
                store, by=by, since=since, until=None, prices=prices, raw=raw), repeat)
    return out


def schema7_queries() -> types.ModuleType:
    """The schema-7 report queries as released, loaded from git."""
    text = subprocess.run(["git", "show", f"{SCHEMA7_REV}:store/reports/aggregate_query.py"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("schema7_aggregate_query")
    exec(compile(text, f"{SCHEMA7_REV}:store/reports/aggregate_query.py", "exec"), module.__dict__)
    return module


def released_times(store: Store, newest: float, repeat: int) -> dict[tuple[str, str], tuple[float, Any]]:
    old, prices = schema7_queries(), load_price_table(None)

    def report(since: float | None, by: str) -> Any:
        pieces, ttfts = old.read_slices(store, by=by, since=since, until=None)
        return aggregate(pieces, ttfts, by=by, prices=prices.lookup, price_version=prices.version, since=since)

    out = {}
    for label, days in WINDOWS:
        since = None if days is None else newest - days * 86400
        for by in BYS:
            out[(label, by)] = timed(lambda since=since, by=by: report(since, by), repeat)
    return out


def counts(path: Path) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("runs", "model_responses", "call_attempts", "tool_executions", "run_totals", "run_ttfts")}
        slices = conn.execute("SELECT count(*) FROM run_totals WHERE model IS NOT NULL").fetchone()[0]
    return [
        f"   runs {rows['runs']:,}; rows summed before: {rows['model_responses']:,} responses, "
        f"{rows['call_attempts']:,} attempts, {rows['tool_executions']:,} tool executions",
        f"   rows read after: {rows['run_totals']:,} run_totals rows ({slices:,} with calls), "
        f"{rows['run_ttfts']:,} run_ttfts rows: {rows['run_ttfts'] / max(1, slices):.1f} TTFT buckets a slice "
        f"of {rows['model_responses'] / max(1, slices):.0f} calls",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--cache-dir", type=Path, default=Path("/var/tmp"))
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs of each report from totals")
    parser.add_argument("--repeat-before", type=int, default=1, help="the same, summing the rows")
    args = parser.parse_args()
    cached = args.cache_dir / f"escrow-bench-report-s7-{args.calls}.db"
    schema7_store(cached, args.calls)
    work = args.cache_dir / f"escrow-bench-report-work-{os.getpid()}.db"
    shutil.copyfile(cached, work)
    try:
        with closing(sqlite3.connect(work)) as conn:
            newest = conn.execute("SELECT max(created_at) FROM runs").fetchone()[0]
        print(f"\n1. before (schema 7: every run summed from its rows), best of {args.repeat_before}")
        with open_at(work, 7) as store:
            print("\n".join(plans(store, raw=True)))
            released = released_times(store, newest, args.repeat_before)
            rows = times(store, newest, raw=True, repeat=args.repeat_before)
        started = time.perf_counter()
        engine = make_engine(make_url(f"sqlite:///{work}"), readonly=False)
        applied = upgrade(engine, 7)
        engine.dispose()
        print(f"\n2. migrate 7 -> 8 (applied {applied}): {time.perf_counter() - started:.1f} s")
        print(f"\n3. after (schema 8: per-run totals), best of {args.repeat}")
        with open_at(work, 8) as store:
            print("\n".join(plans(store, raw=False)))
            after = times(store, newest, raw=False, repeat=args.repeat)
        print("\n   released: schema-7 queries at " + SCHEMA7_REV + "; rows: this version, every run from its rows;"
              "\n   totals: this version, schema 8; identical: the rows report equals the totals report")
        print(f"\n   {'window':<6} {'--by':<6} {'calls':>9} {'released s':>10} {'rows s':>7} {'totals s':>8} "
              f"{'released/totals':>15} {'rows/totals':>11}  identical")
        for key, (new_s, new_report) in after.items():
            old_s, raw = released[key][0], rows[key]
            calls = new_report.total.calls if new_report.total else 0
            same = "yes" if raw[1].model_dump() == new_report.model_dump() else "NO"
            print(f"   {key[0]:<6} {key[1]:<6} {calls:>9,} {old_s:>10.2f} {raw[0]:>7.2f} {new_s:>8.3f} "
                  f"{old_s / new_s:>14.0f}x {raw[0] / new_s:>10.0f}x  {same}")
        print("\n4. rows read")
        print("\n".join(counts(work)))
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{work}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
