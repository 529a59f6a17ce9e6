"""Fleet reports at 10M calls (or --runs N x 100), on SQLite and on PostgreSQL.

The store is generated inside the database by bench/store_generator.py
(chains are placeholders there; reports never read them). For each backend:

1. generate --runs runs x 100 calls at schema 7 (or reuse --sqlite-file, a
   schema-7 file that generator made), timed;
2. ``escrow migrate`` 7 -> 8 (the backfill of every finished run's totals,
   resumable) and 8 -> 9 (the per-day TTFT rollup), each timed;
3. the plans of the report queries (SQLite's EXPLAIN QUERY PLAN; PostgreSQL's
   EXPLAIN of the totals query), then ``report --by model`` and ``--by day``
   over 7 days, 30 days and all time, through schema 8's report code as
   released and through this version, alternated, best of --repeat;
4. with --raw-once, the same all-time ``--by model`` report summing every
   row as a run without totals is read, once, for the ratio.

    .venv/bin/python bench/bench_fleet_report.py [--runs 100000] [--sqlite-file F] [--postgres] [--no-sqlite]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).parent))
from bench_report import SCHEMA8_REV, side_by_side, timed  # noqa: E402  (one definition for both report benches)
from store_generator import generate_sql  # noqa: E402
from throwaway_postgres import throwaway_postgres  # noqa: E402

from orchestrator.composition.launch.reports import report_runs  # noqa: E402
from policies.price_table import load_price_table  # noqa: E402
from store import Store  # noqa: E402
from store.engine import make_engine  # noqa: E402
from store.read.reports import query_plans  # noqa: E402
from store.read.reports.aggregate_query import totals_query  # noqa: E402
from store.schema.migrations import upgrade  # noqa: E402


def as_schema7(url: str) -> None:
    """Take the generated store back to what schema 7 wrote: no totals tables."""
    engine = make_engine(make_url(url), readonly=False)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE ttft_days"))
        conn.execute(text("DROP TABLE run_ttfts"))
        conn.execute(text("DROP TABLE run_totals"))
        conn.execute(text("DELETE FROM escrow_migrations WHERE version >= 8"))
    engine.dispose()


def open_at(url: str, version: int) -> Store:
    parsed = make_url(url)
    return Store(str(parsed), make_engine(parsed, readonly=True), None, version)


def plan_lines(store: Store) -> list[str]:
    if store.dialect == "sqlite":
        return [f"   {name}: " + "; ".join(steps) for name, steps in query_plans(store, None, None).items()]
    with store.read() as conn:
        query = totals_query(None, None, dialect=store.dialect)
        compiled = query.compile(conn, compile_kwargs={"render_postcompile": True, "literal_binds": True})
        return ["   " + row[0] for row in conn.execute(text(f"EXPLAIN {compiled}"))]


def bench(label: str, url: str, runs: int, reuse: bool, repeat: int, raw_once: bool) -> list[str]:
    print(f"\n== {label}", flush=True)
    if not reuse:
        started = time.perf_counter()
        generate_sql(url, runs, log=lambda line: print(line, flush=True))
        as_schema7(url)
        print(f"1. generated {runs:,} runs x 100 calls in {time.perf_counter() - started:.0f} s", flush=True)
    else:
        print("1. reusing the generated schema-7 store", flush=True)
    migrate_s = []
    for start, end in ((7, 8), (8, 9)):
        engine = make_engine(make_url(url), readonly=False)
        started = time.perf_counter()
        applied = upgrade(engine, start, end)
        engine.dispose()
        migrate_s.append(time.perf_counter() - started)
        print(f"2. migrate {start} -> {end} (applied {applied}): {migrate_s[-1]:.0f} s", flush=True)
    prices = load_price_table(None)
    rows = []
    with open_at(url, 9) as store:
        with store.read() as conn:
            calls = conn.execute(text("SELECT count(*) FROM model_responses")).scalar_one()
            newest = conn.execute(select(func.max(text("created_at"))).select_from(text("runs"))).scalar_one()
            totals = conn.execute(text("SELECT count(*) FROM run_totals")).scalar_one()
            buckets = conn.execute(text("SELECT count(*) FROM run_ttfts")).scalar_one()
            days = conn.execute(text("SELECT count(*) FROM ttft_days")).scalar_one()
        print(f"   {calls:,} calls; {totals:,} run_totals rows; {days:,} ttft_days rows over whole days "
              f"(schema 8 read {buckets:,} run_ttfts rows)")
        print("3. plans of this version's queries:")
        print("\n".join(plan_lines(store)), flush=True)
        print(f"   schema 8 as released at {SCHEMA8_REV}, then this version, alternated, best of {repeat}:")
        for (window, by), (s8, _, r8, now_s, _, report) in side_by_side(store, newest, repeat).items():
            covered = report.total.calls if report.total else 0
            same = "identical" if r8.model_dump() == report.model_dump() else "DIFFERENT"
            rows.append(f"   {label:<10} {calls:>11,} --since {window:<4} --by {by:<6} {covered:>11,} "
                        f"{s8 * 1000:9.0f} ms {now_s * 1000:9.0f} ms {s8 / now_s:5.1f}x {same}")
            print(rows[-1], flush=True)
        if raw_once:
            seconds, _ = timed(lambda: report_runs(store, by="model", since=None, until=None, prices=prices,
                                                   raw=True), 1)
            rows.append(f"   {label:<10} {calls:>11,} all-time --by model summing every row: {seconds:.1f} s")
            print(rows[-1], flush=True)
    rows.append(f"   {label:<10} migrate 7 -> 8 (backfill of the totals): {migrate_s[0]:.0f} s; "
                f"8 -> 9 (the day rollup): {migrate_s[1]:.0f} s")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100_000, help="runs of 100 calls each")
    parser.add_argument("--sqlite-file", type=Path, default=None,
                        help="a schema-7 store generated by bench/store_generator.py (migrated in place)")
    parser.add_argument("--postgres", action="store_true", help="also generate and time on a throwaway PostgreSQL")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--raw-once", action="store_true")
    args = parser.parse_args()
    table = []
    if not args.no_sqlite:
        path = args.sqlite_file or Path(f"/var/tmp/escrow-bench-fleet-{args.runs}.db")
        reuse = args.sqlite_file is not None and path.exists()
        table += bench("sqlite", f"sqlite:///{path}", args.runs, reuse, args.repeat, args.raw_once)
    if args.postgres:
        with throwaway_postgres() as url:
            table += bench("postgresql", url, args.runs, False, args.repeat, args.raw_once)
    print(f"\n   {'backend':<10} {'calls':>11} {'report':<28} {'covered':>11} {'schema 8':>12} {'now':>12}")
    print("\n".join(table))


if __name__ == "__main__":
    main()
