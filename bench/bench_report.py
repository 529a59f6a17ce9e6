"""Aggregate reports over 1,000,000 model calls (or --calls N): schema 7
(every run's rows), schema 8 as released (per-run totals), schema 9 as
released (the per-day TTFT rollup, lean folding and costing; totals read
unchecked) and this version (schema 12: every totals row's digest checked
against its run's chain head, and the TTFT rollups against the totals'
TTFT checks), in one run.

A schema-7 store of N/100 finished runs x 100 turns (call, response, HTTP
attempt and turn row each, hash-chained) is generated with
bench/bench_store.py's generator and cached. Each response gets a TTFT that
grows with its prompt (prefill) with some noise, hashed into its chain like
any other cell, so the TTFT histograms hold what a real run's would. Each
run of this bench works on a copy of the cached store:

1. before: ``report --by model|day`` over 7 days, 30 days and all time
   through the schema-7 queries as released (store/read/reports/aggregate_query.py
   at SCHEMA7_REV, read from git), and through this version's row path
   (``raw``: every run summed from its rows, as a run without totals is
   read), with the row path's EXPLAIN QUERY PLAN; best of --repeat-before (1);
   --skip-before leaves this step out;
2. ``escrow migrate`` 7 -> 8 (the resumable backfill of the totals),
   8 -> 9 (the rollup built from them), 9 -> 10 (digests), 10 -> 11
   (TTFT checks) and 11 -> 12 (the count of calls that reported a cached
   count; the totals the 7 -> 8 backfill wrote already carry all three),
   each timed;
3. after: the plans of this version's queries, then each report through the
   schema-8 and schema-9 report code as released (the store's queries and
   the costing core at SCHEMA8_REV and SCHEMA9_REV, read from git) and
   through this version, alternated, best of --repeat (3): wall and CPU
   seconds side by side, the ratios (``now/9``: what the digest check
   costs), and whether every report is identical each way;
4. the rows each side reads.

Usage: .venv/bin/python bench/bench_report.py [--calls 1000000] [--cache-dir /var/tmp] [--skip-before]
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
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from orchestrator.composition.launch.reports import report_runs
from orchestrator.costing.aggregate import aggregate
from policies.price_table import load_price_table
from store import Store
from store.engine import make_engine
from store.read import run_totals, ttft_buckets
from store.read.reports import query_plans
from store.schema.migrations import upgrade
from store.write import totals_figures

ROOT = Path(__file__).resolve().parents[1]
SCHEMA7_REV = "14a009a"  # the last commit whose report queries summed every run's rows
SCHEMA8_REV = "f2a614a"  # the last commit whose reports summed every run's TTFT buckets
SCHEMA9_REV = "d030d22"  # the last commit whose reports read the totals without checking their digests
WINDOWS = (("7d", 7), ("30d", 30), ("all", None))
BYS = ("model", "day")


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, _, result = best_of(fn, repeat)
    return best, result


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """The best wall seconds of ``repeat`` runs, the best CPU seconds (on a
    shared machine the steadier figure: waiting for a core is not counted),
    and the result."""
    best, cpu, result = float("inf"), float("inf"), None
    for _ in range(repeat):
        started, cpu_started = time.perf_counter(), time.process_time()
        result = fn()
        best, cpu = min(best, time.perf_counter() - started), min(cpu, time.process_time() - cpu_started)
    return best, cpu, result


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
        conn.execute("DROP TABLE ttft_days")
        conn.execute("DELETE FROM escrow_migrations WHERE version >= 8")
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
            out[(label, by)] = timed(partial(report_runs, store, by=by, since=since, until=None, prices=prices,
                                             raw=raw), repeat)
    return out


def released(rev: str, path: str) -> types.ModuleType:
    """A module as released at ``rev``, loaded from git."""
    text = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout
    module = types.ModuleType(f"released_{rev}_{Path(path).stem}")
    sys.modules[module.__name__] = module  # pydantic resolves the module's annotations through it
    exec(compile(text, f"{rev}:{path}", "exec"), module.__dict__)
    return module


def released_times(store: Store, newest: float, repeat: int) -> dict[tuple[str, str], tuple[float, Any]]:
    with figures_as_released():
        old = released(SCHEMA7_REV, "store/read/reports/aggregate_query.py")
    prices = load_price_table(None)

    def report(since: float | None, by: str) -> Any:
        with figures_as_released():
            pieces, ttfts = old.read_slices(store, by=by, since=since, until=None)
        return aggregate(pieces, ttfts, by=by, prices=prices.lookup, price_version=prices.version, since=since)

    out = {}
    for label, days in WINDOWS:
        since = None if days is None else newest - days * 86400
        for by in BYS:
            out[(label, by)] = timed(partial(report, since, by), repeat)
    return out


# The totals figures schemas 8 to 10 stored: the released queries read this
# version's store modules, whose totals carry schema 11's TTFT check and
# schema 12's count of calls that reported a cached count too.
RELEASED_FIGURES = tuple(name for name in totals_figures.FIGURES if name not in ("ttft_check", "cached_reported"))


# What the released queries read from store.read.run_totals that lives in store.read.ttft_buckets
# and store.write.totals_figures now.
RELEASED_NAMES = {
    "ttft_bucket": ttft_buckets.ttft_bucket, "bucket_seconds": ttft_buckets.bucket_seconds,
    **{name: getattr(totals_figures, name) for name in (
        "Key", "Totals", "INT_FIGURES", "FIGURE_IS_INT", "ROW_IN_RUN", "MARKER_ROW", "digest", "digester", "in_run",
        "canonical", "from_row", "order")},
}


@contextmanager
def figures_as_released() -> Iterator[None]:
    kept = totals_figures.FIGURES
    missing = [name for name in (*RELEASED_NAMES, "FIGURES") if not hasattr(run_totals, name)]
    for name in missing:
        setattr(run_totals, name, RELEASED_NAMES.get(name))
    run_totals.FIGURES = totals_figures.FIGURES = RELEASED_FIGURES  # type: ignore[attr-defined]
    try:
        yield
    finally:
        totals_figures.FIGURES = kept
        for name in missing:
            delattr(run_totals, name)


def released_report(rev: str) -> Callable[..., Any]:
    """``report_runs`` as released at ``rev``: its store queries and its costing core."""
    with figures_as_released():
        queries = released(rev, "store/read/reports/aggregate_query.py")
        costing = released(rev, "orchestrator/costing/aggregate.py")
    prices = load_price_table(None)

    def report(store: Store, by: str, since: float | None) -> Any:
        with figures_as_released():
            pieces, ttfts = queries.read_slices(store, by=by, since=since, until=None)
        return costing.aggregate(pieces, ttfts, by=by, prices=prices.lookup, price_version=prices.version,
                                 since=since)

    return report


def side_by_side(store: Store, newest: float, repeat: int) -> dict[tuple[str, str], tuple[Any, ...]]:
    """Per report: (schema-8 wall, cpu, report, schema-9 wall, cpu, report,
    this version's wall, cpu, report), alternated."""
    old, unchecked, prices, out = released_report(SCHEMA8_REV), released_report(SCHEMA9_REV), load_price_table(None), {}
    for label, days in WINDOWS:
        since = None if days is None else newest - days * 86400
        for by in BYS:
            sides = (lambda since=since, by=by: old(store, by, since),
                     lambda since=since, by=by: unchecked(store, by, since),
                     lambda since=since, by=by: report_runs(store, by=by, since=since, until=None, prices=prices))
            best = [best_of(side, 1) for side in sides]
            for _ in range(repeat - 1):
                best = [(min(b[0], t[0]), min(b[1], t[1]), t[2])
                        for b, t in ((b, best_of(side, 1)) for b, side in zip(best, sides, strict=True))]
            out[(label, by)] = (*best[0], *best[1], *best[2])
    return out


def counts(path: Path) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("runs", "model_responses", "call_attempts", "tool_executions", "run_totals", "run_ttfts",
                          "ttft_days")}
        slices = conn.execute("SELECT count(*) FROM run_totals WHERE model IS NOT NULL").fetchone()[0]
        days = conn.execute("SELECT count(DISTINCT day) FROM ttft_days").fetchone()[0]
    return [
        f"   runs {rows['runs']:,}; rows summed at schema 7: {rows['model_responses']:,} responses, "
        f"{rows['call_attempts']:,} attempts, {rows['tool_executions']:,} tool executions",
        f"   schema 8 reads {rows['run_totals']:,} run_totals rows ({slices:,} with calls) and "
        f"{rows['run_ttfts']:,} run_ttfts rows ({rows['run_ttfts'] / max(1, slices):.1f} TTFT buckets a slice "
        f"of {rows['model_responses'] / max(1, slices):.0f} calls)",
        f"   schema 9 reads the same run_totals rows and, over whole days, {rows['ttft_days']:,} ttft_days rows "
        f"({days:,} days) instead of the run_ttfts rows",
    ]


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def migrate(work: Path, start: int, end: int) -> None:
    started = time.perf_counter()
    engine = make_engine(make_url(f"sqlite:///{work}"), readonly=False)
    applied = upgrade(engine, start, end)
    engine.dispose()
    print(f"   migrate {start} -> {end} (applied {applied}): {time.perf_counter() - started:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--cache-dir", type=Path, default=Path("/var/tmp"))
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs of each report after")
    parser.add_argument("--repeat-before", type=int, default=1, help="the same, at schema 7")
    parser.add_argument("--skip-before", action="store_true", help="leave out the schema-7 timings (step 1)")
    args = parser.parse_args()
    cached = args.cache_dir / f"escrow-bench-report-s7-{args.calls}.db"
    schema7_store(cached, args.calls)
    work = args.cache_dir / f"escrow-bench-report-work-{os.getpid()}.db"
    shutil.copyfile(cached, work)
    print(f"start: {load()}", flush=True)
    try:
        with closing(sqlite3.connect(work)) as conn:
            newest = conn.execute("SELECT max(created_at) FROM runs").fetchone()[0]
        before: dict[tuple[str, str], tuple[float, Any]] = {}
        rows: dict[tuple[str, str], tuple[float, Any]] = {}
        if not args.skip_before:
            print(f"\n1. before (schema 7: every run summed from its rows), best of {args.repeat_before}")
            with open_at(work, 7) as store:
                print("\n".join(plans(store, raw=True)))
                before = released_times(store, newest, args.repeat_before)
                rows = times(store, newest, raw=True, repeat=args.repeat_before)
        print("\n2. migrations")
        migrate(work, 7, 8)
        migrate(work, 8, 9)
        migrate(work, 9, 10)
        migrate(work, 10, 11)
        migrate(work, 11, 12)
        print(f"\n3. after: schema 8 as released at {SCHEMA8_REV}, schema 9 (totals read unchecked) at "
              f"{SCHEMA9_REV} and this version (schema 12: every totals row's digest and the TTFT rollups "
              f"checked), alternated, best of {args.repeat}; {load()}")
        with open_at(work, 12) as store:
            print("\n".join(plans(store, raw=False)), flush=True)
            after = side_by_side(store, newest, args.repeat)
        print("\n   s: best wall seconds (cpu: best CPU seconds); schema 7: its queries as released at "
              f"{SCHEMA7_REV}; rows: this version reading every run from its rows;\n   identical: the schema-8 "
              "report (and the rows report) equals this version's, model_dump for model_dump")
        head = f"{'schema 7 s':>10} {'rows s':>7} " if before else ""
        print(f"\n   {'window':<6} {'--by':<6} {'calls':>9} {head}{'schema 8 s':>10} {'cpu':>6} "
              f"{'schema 9 s':>10} {'cpu':>6} {'now s':>7} {'cpu':>6} {'8/now':>6}{' 7/now' if before else ''} "
              f"{'now/9':>6} {'cpu':>5}  identical")
        for key, (s8, c8, r8, s9, c9, r9, now_s, now_c, report) in after.items():
            calls = report.total.calls if report.total else 0
            dump = report.model_dump()
            same = (r8.model_dump() == dump and r9.model_dump() == dump
                    and (not rows or rows[key][1].model_dump() == dump))
            old = f"{before[key][0]:>10.2f} {rows[key][0]:>7.2f} " if before else ""
            ratio7 = f" {before[key][0] / now_s:>5.0f}x" if before else ""
            print(f"   {key[0]:<6} {key[1]:<6} {calls:>9,} {old}{s8:>10.3f} {c8:>6.3f} {s9:>10.3f} {c9:>6.3f} "
                  f"{now_s:>7.3f} {now_c:>6.3f} {s8 / now_s:>5.1f}x{ratio7} {now_s / s9:>5.2f}x {now_c / c9:>4.2f}x  "
                  f"{'yes' if same else 'NO'}")
        print("\n   now/9: this version's wall time over schema 9's, then its CPU time over schema 9's "
              "(the checks' cost; 1.10 is 10% slower)")
        print(f"\n4. rows read; end: {load()}")
        print("\n".join(counts(work)))
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{work}{suffix}").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
