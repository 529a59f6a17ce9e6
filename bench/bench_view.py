"""Server time of `escrow view` pages: the runs page on a store of 10,000
runs and the run page of a 200-turn run. Goal: under 300 ms each.

The store: 40 varied runs of 1-3 turns recorded through the Recorder
(store.synthetic.record_many), cloned with SQL into 10,000 runs an hour
apart, each clone re-chained (its hash chain verifies), plus one 200-turn
run recorded through the Recorder. Pages are requested in-process through
Starlette's test client, so the time is the server's: routing, SQL, and
template rendering, without a network. Each figure is the best and the
median of several requests; the run page is also timed cold (its chain is
verified on the first request, then cached per chain head).

The run page and compare page are then timed side by side with the way they
were first built (every call's full row read, the whole trajectory, all
turns on one page), calling the pages in-process, interleaved round by
round so that both see the same machine load.

Usage: .venv/bin/python bench/bench_view.py [--runs 10000] [--turns 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from contextlib import closing
from pathlib import Path

from starlette.testclient import TestClient

from cli.view.app import create_app
from cli.view.compare import align
from cli.view.pages import run_shown
from cli.view.render import Links
from cli.view.site import Site
from store import Recorder, Store, synthetic
from store.chain import genesis, link
from store.tables import CHAINED_TABLES

TEMPLATES = 40
REFERENCES = ("run_id", "call_id", "candidate_id", "attempt_of")


def clone_runs(path: Path, total: int) -> None:
    """Copy the store's runs until it holds ``total``, re-chaining each copy."""
    with closing(sqlite3.connect(path)) as conn:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA synchronous = OFF")
        runs = [dict(r) for r in conn.execute("SELECT * FROM runs ORDER BY created_at")]
        chained = {r["id"]: sorted(
            ((t, dict(row)) for t in CHAINED_TABLES for row in conn.execute(f"SELECT * FROM {t} WHERE run_id = ?", (r["id"],))),
            key=lambda item: item[1]["seq"]) for r in runs}
        last = runs[-1]["created_at"]
        for n in range(total - len(runs)):
            template = runs[n % len(runs)]
            suffix = f"{n:06d}"
            run = {**template, "id": template["id"][:26] + suffix, "created_at": last + 3600 * (n + 1),
                   "task": f"{template['task']} (copy {n})"}
            run["finished_at"] = run["created_at"] + 60
            head = genesis(run)
            rows = []
            for table, row in chained[template["id"]]:
                new = {**row, "id": row["id"][:26] + suffix}
                for column in REFERENCES:
                    if new.get(column):
                        new[column] = new[column][:26] + suffix
                if table == "events" and new["kind"] == "verdict":
                    new["at"] = run["finished_at"]
                new.pop("chain_hash")
                new["chain_hash"] = head = link(head, table, new)
                rows.append((table, new))
            run["chain_head"] = head
            insert(conn, "runs", run)
            for table, row in rows:
                insert(conn, table, row)
            if n % 1000 == 999:
                conn.commit()
        conn.commit()
        conn.execute("ANALYZE")


def insert(conn: sqlite3.Connection, table: str, row: dict) -> None:
    columns = ", ".join(f'"{c}"' for c in row)
    conn.execute(f"INSERT INTO {table} ({columns}) VALUES ({', '.join('?' * len(row))})", tuple(row.values()))


def timed(client: TestClient, url: str, repeat: int) -> tuple[float, float, float, int]:
    """Best and median wall time, median CPU time of this process, and size."""
    samples, cpu = [], []
    size = 0
    for _ in range(repeat):
        started, cpu_started = time.perf_counter(), time.process_time()
        response = client.get(url)
        samples.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
        assert response.status_code == 200, (url, response.status_code)
        size = len(response.content)
    return min(samples), statistics.median(samples), statistics.median(cpu), size


def first_run_page(site: Site, run_id: str) -> str:
    """The run page as first built: the whole trajectory with every request's
    text, all turns on one page."""
    trajectory = site.store.trajectory(run_id)
    return site.render_run(trajectory, run_shown(trajectory), None, index=site.store.turn_index(run_id), pages=[], page=1)


def first_compare_page(site: Site, a: str, b: str) -> str:
    """The compare page as first built: both whole trajectories."""
    comparison = align(site.store.trajectory(a), site.store.trajectory(b))
    checks = [site.check(t.run.id, t.run.chain_seq, t.run.chain_head) for t in (comparison.a, comparison.b)]
    return site.render.page("compare.html", cmp=comparison, checks=checks)


def side_by_side(store: Store, run_id: str, turns: int, repeat: int) -> None:
    served, bundle = Site(store, Links(static=False)), Site(store, Links(static=True))
    variants = {
        f"run page as first built (full rows, {turns} turns)": lambda: first_run_page(served, run_id),
        f"run page now, all {turns} turns (the bundle's page)": lambda: bundle.run_page(run_id),
        "run page now, served: first 50 turns": lambda: served.run_page(run_id),
        "run page now, served: turns 150-199": lambda: served.run_page(run_id, page=4),
        "compare as first built (full rows)": lambda: first_compare_page(served, run_id, run_id),
        "compare now (requests read where hashes differ)": lambda: served.compare_page(run_id, run_id),
    }
    wall: dict[str, list[float]] = {k: [] for k in variants}
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    for render in variants.values():
        render()  # chain checks cached, as on the served pages
    for _ in range(repeat):
        for label, render in variants.items():
            started, cpu_started = time.perf_counter(), time.process_time()
            render()
            wall[label].append(time.perf_counter() - started)
            cpu[label].append(time.process_time() - cpu_started)
    print(f"\nside by side, in-process, interleaved ({repeat} rounds)")
    print(f"{'page':<58} {'best ms':>8} {'median ms':>10} {'cpu ms':>7}")
    for label in variants:
        print(f"{label:<58} {min(wall[label]) * 1000:8.1f} {statistics.median(wall[label]) * 1000:10.1f} "
              f"{statistics.median(cpu[label]) * 1000:7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="escrow-bench-view-"))
    path = folder / "escrow.db"
    started = time.perf_counter()
    with Store.open(f"sqlite:///{path}", synchronous="OFF") as store:
        synthetic.record_many(store, TEMPLATES, turns=3, seed=5)
    clone_runs(path, args.runs - 1)
    with Store.open(f"sqlite:///{path}", synchronous="OFF") as store:
        long_run = synthetic.record_run(Recorder(store), turns=args.turns, seed=9)
    print(f"store: {args.runs} runs ({args.turns}-turn run {long_run[:12]}) generated in {time.perf_counter() - started:.1f} s, "
          f"{path.stat().st_size / 1e6:.1f} MB at {path}\n")
    goal = 0.300
    with Store.open(f"sqlite:///{path}", create=False, readonly=True) as store:
        client = TestClient(create_app(store))
        assert store.verify(long_run).ok
        _, cold, cold_cpu, size = timed(client, f"/run/{long_run}", 1)
        print(f"{'page':<58} {'best ms':>8} {'median ms':>10} {'cpu ms':>7} {'KiB':>7}  goal 300 ms (median)")
        print(f"{f'run page, {args.turns} turns, first 50, cold (chain verified)':<58} {cold * 1000:8.1f} {cold * 1000:10.1f} "
              f"{cold_cpu * 1000:7.1f} {size / 1024:7.1f}  {'ok' if cold < goal else 'OVER'}")
        pages = (
            (f"run page, {args.turns} turns, first 50 (chain check cached)", f"/run/{long_run}"),
            (f"run page, {args.turns} turns, last 50", f"/run/{long_run}?page=4"),
            (f"run page, {args.turns} turns, search 'pytest -k t1'", f"/run/{long_run}?q=pytest+-k+t1"),
            (f"runs page 1 of {args.runs}, newest first", "/"),
            ("runs page 150, newest first", "/?page=150"),
            ("runs page, verdict=PASS", "/?verdict=PASS"),
            ("runs page, model + text search", "/?model=qwen3-0.6b&q=copy+12"),
            ("runs page, sorted by cost (aggregates every run)", "/?sort=cost"),
            ("runs page, turns >= 3 and cost <= $0.001", "/?min_turns=3&max_cost=0.001"),
            ("runs page, date window", "/?since=2024-01-01&until=2024-02-01"),
            (f"compare, {args.turns}-turn run with itself", f"/compare?a={long_run}&b={long_run}"),
        )
        for label, url in pages:
            best, median, cpu, size = timed(client, url, args.repeat)
            print(f"{label:<58} {best * 1000:8.1f} {median * 1000:10.1f} {cpu * 1000:7.1f} {size / 1024:7.1f}  "
                  f"{'ok' if median < goal else 'OVER'}")
        side_by_side(store, long_run, args.turns, args.repeat)


if __name__ == "__main__":
    main()
