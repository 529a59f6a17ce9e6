"""Cost reports on a generated store of 10,000 runs and 1,000,000 model calls.

The store is the one bench/bench_store.py generates (and caches); it is
generated here with the same code when missing. Prints the EXPLAIN QUERY PLAN
of each aggregate query (every large table must be reached through an index;
a SCAN of one is flagged), then times, best of 3:

- ``report RUN`` of a 100-turn run, in-process and as a real subprocess;
- aggregates ``--by model|day`` over windows of 7 and 30 days and all time,
  side by side with the number of calls each one covers;
- the HTML rendering of both.

Usage: .venv/bin/python bench/bench_report.py [--cache /var/tmp/escrow-bench-store.db]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.costing import aggregate_html, run_html
from policies.price_table import load_price_table
from store import Store
from store.reports import query_plans
from orchestrator.launch.reports import report_run, report_runs

SMALL_TABLES = ("runs",)  # 10,000 rows: scanning it is cheaper than an index walk plus a sort


def timed(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def ensure_store(path: Path) -> None:
    if path.exists():
        return
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_store  # the store bench's generator: one generator for both benches

    print(f"generating {bench_store.RUNS} runs x {bench_store.CALLS_PER_RUN} calls at {path} ...")
    Store.open(f"sqlite:///{path}").close()
    bench_store.generate(path)


def show_plans(store: Store, now: float) -> list[str]:
    """Print plans; return the steps that scan a large table."""
    scans = []
    for label, since in (("--since 7d", now - 7 * 86400), ("all time", None)):
        for name, steps in query_plans(store, since, None).items():
            print(f"   plan {name:<9} {label:<10} " + "; ".join(steps))
            scans += [s for s in steps if s.startswith("SCAN") and s.split()[1] not in SMALL_TABLES]
    return scans


def covering_index_ablation(store: Store, since: float | None) -> None:
    """The same aggregate SQL twice in one run: as the planner chooses (the
    covering index of migration 3) and pinned to the index schema 2 had for
    responses, (run_id, seq)."""
    from store.reports.aggregate_query import slices_query

    sql = str(slices_query(since, None).compile(dialect=store._reader.dialect, compile_kwargs={"literal_binds": True}))
    pinned = sql.replace("JOIN model_responses ON", "JOIN model_responses INDEXED BY sqlite_autoindex_model_responses_2 ON")
    assert pinned != sql, "the ablation did not change the query"
    with store.read() as conn:
        covering, rows = timed(lambda: conn.exec_driver_sql(sql).fetchall())
        schema2, rows2 = timed(lambda: conn.exec_driver_sql(pinned).fetchall())
    assert sorted(rows) == sorted(rows2), "both plans must return the same sums"
    label = "all time" if since is None else "--since 7d"
    print(f"   {label:<10} covering index {covering * 1000:8.1f} ms   schema-2 indexes {schema2 * 1000:8.1f} ms"
          f"   ratio {schema2 / covering:.2f}x  ({len(rows)} run/model rows)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=Path("/var/tmp/escrow-bench-store.db"))
    args = parser.parse_args()
    ensure_store(args.cache)
    url = f"sqlite:///{args.cache}"
    prices = load_price_table(None)
    now = time.time()
    with Store.open(url, readonly=True) as store:
        with store.read() as conn:
            runs = conn.exec_driver_sql("SELECT count(*) FROM runs").scalar() or 0
            calls = conn.exec_driver_sql("SELECT count(*) FROM model_calls").scalar()
            newest = conn.exec_driver_sql("SELECT max(created_at) FROM runs").scalar() or now
            sample = conn.exec_driver_sql(f"SELECT id FROM runs ORDER BY created_at LIMIT 1 OFFSET {runs // 2}").scalar()
        print(f"store: {runs} runs, {calls} model calls, {args.cache.stat().st_size / 1e9:.2f} GB ({args.cache})\n")
        print("1. query plans of the aggregate queries")
        scans = show_plans(store, newest)
        print("   every large table reached through an index" if not scans else f"   MISSING INDEX: {scans}")

        print("\n2. times, best of 3")
        seconds, single = timed(lambda: report_run(store, str(sample), prices))
        print(f"   report RUN ({len(single.turns)} turns)                      {seconds * 1000:8.1f} ms")
        seconds, _ = timed(lambda: run_html(single))
        print(f"   its HTML page                                  {seconds * 1000:8.1f} ms")
        for label, since in (("7d", newest - 7 * 86400), ("30d", newest - 30 * 86400), ("all", None)):
            for by in ("model", "day"):
                seconds, many = timed(lambda since=since, by=by: report_runs(store, by=by, since=since, until=None, prices=prices))
                covered = many.total.calls if many.total else 0
                rate = covered / seconds / 1e6 if seconds else 0.0
                print(f"   report --since {label:<4} --by {by:<6} {covered:>9} calls  {seconds * 1000:8.1f} ms  ({rate:.2f} M calls/s)")
        seconds, _ = timed(lambda: aggregate_html(many))
        print(f"   HTML page of the last aggregate ({len(many.groups)} groups)    {seconds * 1000:8.1f} ms")

        print("\n3. the per-run sums, with and without migration 3's covering index (best of 3)")
        for since in (newest - 7 * 86400, None):
            covering_index_ablation(store, since)

    escrow = str(Path(sys.executable).with_name("escrow"))

    def cli(*argv: str) -> float:
        return timed(lambda: subprocess.run([escrow, *argv], check=True, capture_output=True))[0]

    print("\n4. as real commands (includes interpreter start-up)")
    baseline = cli("--version")
    print(f"   escrow --version                               {baseline * 1000:8.0f} ms")
    for argv in (("report", str(sample)[:12]), ("report", "--since", "7d", "--by", "model"), ("report", "--by", "day", "--json")):
        print(f"   escrow {' '.join(argv):<40}{cli(*argv, '--db', url) * 1000:8.0f} ms")


if __name__ == "__main__":
    main()
