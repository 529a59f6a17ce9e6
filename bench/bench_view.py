"""Server time of `escrow view` pages: the runs page on a store of 10,000
runs and the run page of a 200-turn run. Goal: under 300 ms each.

The store: 40 varied runs of 1-3 turns recorded through the Recorder
(store.write.synthetic.record_many), cloned with SQL into 10,000 runs an hour
apart, each clone re-chained (its hash chain verifies), plus one 200-turn
run recorded through the Recorder. Pages are requested in-process through
Starlette's test client, so the time is the server's: routing, SQL, and
template rendering, without a network. Each figure is the best and the
median of several requests. "Cold" rows use a new application each time
(nothing cached): the first view of a run sends the page without verifying
the chain, and the frame on it (``/run/RUN/verified``) verifies it; a
second 200-turn run that parts from the first at turn 0 is compared with it.

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
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from starlette.testclient import TestClient

from cli.view.app import create_app
from cli.view.compare import align, request_pairs, with_requests
from cli.view.jinja_pages import Links
from cli.view.pages import run_shown
from cli.view.site import Site
from store import Recorder, Store
from store.chain import genesis, link
from store.schema.tables import CHAINED_TABLES
from store.write import synthetic

TEMPLATES = 40
REFERENCES = ("run_id", "call_id", "candidate_id", "attempt_of")


def clone_runs(path: Path, total: int) -> None:
    """Copy the store's runs until it holds ``total``, re-chaining each copy."""
    with closing(sqlite3.connect(path)) as conn:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA synchronous = OFF")
        runs = [dict(r) for r in conn.execute("SELECT * FROM runs ORDER BY created_at")]
        chained = {
            r["id"]: sorted(
                (
                    (t, dict(row))
                    for t in CHAINED_TABLES
                    for row in conn.execute(f"SELECT * FROM {t} WHERE run_id = ?", (r["id"],))
                ),
                key=lambda item: item[1]["seq"],
            )
            for r in runs
        }
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


def timed(
    client: TestClient, url: str, repeat: int, fresh: Callable[[], TestClient] | None = None
) -> tuple[float, float, float, int]:
    """Best and median wall time, median CPU time of this process, and size;
    with ``fresh``, each request goes to a new application (nothing cached)."""
    samples, cpu = [], []
    size = 0
    for _ in range(repeat):
        if fresh is not None:
            client = fresh()
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
    return site.render_run(
        trajectory, run_shown(trajectory), None, index=site.store.turn_index(run_id), pages=[], page=1
    )


def first_compare_page(site: Site, a: str, b: str) -> str:
    """The compare page as first built: both whole trajectories."""
    comparison = align(site.store.trajectory(a), site.store.trajectory(b))
    checks = [(t.run.id, site.check(t.run.id, t.run.chain_seq, t.run.chain_head)) for t in (comparison.a, comparison.b)]
    return site.render.page("compare.html", cmp=comparison, checks=checks)


def whole_search_page(site: Site, run_id: str, query: str) -> str:
    """Search as before: every turn of the run read and checked."""
    part = site.store.turn_slice(run_id)
    return site.render_run(part.trajectory, run_shown(part.trajectory, part.appended_before, part.last_messages), query,
                           index=site.store.turn_index(run_id), pages=[], page=1)


def whole_requests_compare_page(site: Site, a: str, b: str) -> str:
    """Compare as before: every turn whose request hashes differ read whole."""
    left, right = (site.store.turn_slice(r, tails=False, detail=False).trajectory for r in (a, b))
    pairs = request_pairs(left, right)
    texts = site.store.requests([c for p in pairs.values() for c in p if c is not None])
    comparison = align(with_requests(left, texts), with_requests(right, texts))
    checks = [(t.run.id, site.check(t.run.id, t.run.chain_seq, t.run.chain_head)) for t in (comparison.a, comparison.b)]
    return site.render.page("compare.html", cmp=comparison, checks=checks)


def cold_page_as_before(store: Store, run_id: str) -> str:
    """The first view as before: the chain verified before the page is sent."""
    site = Site(store, Links(static=False))
    run = store.run(run_id)
    site.check(run.id, run.chain_seq, run.chain_head)
    return site.run_page(run_id)


def side_by_side(store: Store, run_id: str, other: str, turns: int, repeat: int) -> None:
    served, bundle = Site(store, Links(static=False)), Site(store, Links(static=True))
    variants = {
        "first view as before (chain verified, then the page)": lambda: cold_page_as_before(store, run_id),
        "first view now: the page (new application)": lambda: Site(store, Links(static=False)).run_page(run_id),
        "first view now: its chain frame (new application)": lambda: Site(store, Links(static=False)).chain_status_page(
            run_id
        ),
        "search 'pytest -k t1' as before (every turn read)": lambda: whole_search_page(served, run_id, "pytest -k t1"),
        "search 'pytest -k t1' now (candidates, 50 a page)": lambda: served.run_page(run_id, "pytest -k t1"),
        "search 'denied' as before (every turn read)": lambda: whole_search_page(served, run_id, "denied"),
        "search 'denied' now": lambda: served.run_page(run_id, "denied"),
        "compare, parted at turn 0, as before (all requests read)": lambda: whole_requests_compare_page(
            served, run_id, other
        ),
        "compare, parted at turn 0, now (outlines)": lambda: served.compare_page(run_id, other),
        f"run page as first built (full rows, {turns} turns)": lambda: first_run_page(served, run_id),
        f"run page now, all {turns} turns (the bundle's page)": lambda: bundle.run_page(run_id),
        "run page now, served: first 50 turns": lambda: served.run_page(run_id),
        "run page now, served: turns 150-199": lambda: served.run_page(run_id, page=4),
        "compare as first built (full rows)": lambda: first_compare_page(served, run_id, run_id),
        "compare with itself now": lambda: served.compare_page(run_id, run_id),
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
        other_run = synthetic.record_run(Recorder(store), turns=args.turns, seed=10)
    print(
        f"store: {args.runs} runs ({args.turns}-turn run {long_run[:12]}) generated in "
        f"{time.perf_counter() - started:.1f} s, "
        f"{path.stat().st_size / 1e6:.1f} MB at {path}\n"
    )
    goal = 0.300
    with Store.open(f"sqlite:///{path}", create=False, readonly=True) as store:
        client = TestClient(create_app(store))
        assert store.verify(long_run).ok

        def fresh() -> TestClient:
            return TestClient(create_app(store))

        print(f"{'page':<58} {'best ms':>8} {'median ms':>10} {'cpu ms':>7} {'KiB':>7}  goal 300 ms (median)")
        for label, url in ((f"run page, {args.turns} turns, first 50, cold (new app)", f"/run/{long_run}"),
                           ("  its chain frame, cold (verifies the whole chain)", f"/run/{long_run}/verified"),
                           ("compare, parted at turn 0, cold (new app)", f"/compare?a={long_run}&b={other_run}")):
            best, median, cpu, size = timed(client, url, args.repeat, fresh)
            print(f"{label:<58} {best * 1000:8.1f} {median * 1000:10.1f} {cpu * 1000:7.1f} {size / 1024:7.1f}  "
                  f"{'ok' if median < goal else 'OVER'}")
        client.get(f"/run/{long_run}/verified")
        client.get(f"/run/{other_run}/verified")
        pages = (
            (f"run page, {args.turns} turns, first 50 (chain check cached)", f"/run/{long_run}"),
            (f"run page, {args.turns} turns, last 50", f"/run/{long_run}?page=4"),
            (f"run page, {args.turns} turns, search 'pytest -k t1'", f"/run/{long_run}?q=pytest+-k+t1"),
            (f"run page, {args.turns} turns, search 'denied'", f"/run/{long_run}?q=denied"),
            (f"run page, {args.turns} turns, search 'zzz' (no match)", f"/run/{long_run}?q=zzz"),
            (f"runs page 1 of {args.runs}, newest first", "/"),
            ("runs page 150, newest first", "/?page=150"),
            ("runs page, verdict=PASS", "/?verdict=PASS"),
            ("runs page, model + text search", "/?model=qwen3-0.6b&q=copy+12"),
            ("runs page, sorted by cost (aggregates every run)", "/?sort=cost"),
            ("runs page, turns >= 3 and cost <= $0.001", "/?min_turns=3&max_cost=0.001"),
            ("runs page, date window", "/?since=2024-01-01&until=2024-02-01"),
            (f"compare, {args.turns}-turn run with itself", f"/compare?a={long_run}&b={long_run}"),
            (f"compare, {args.turns}-turn runs parted at turn 0", f"/compare?a={long_run}&b={other_run}"),
        )
        for label, url in pages:
            best, median, cpu, size = timed(client, url, args.repeat)
            print(f"{label:<58} {best * 1000:8.1f} {median * 1000:10.1f} {cpu * 1000:7.1f} {size / 1024:7.1f}  "
                  f"{'ok' if median < goal else 'OVER'}")
        side_by_side(store, long_run, other_run, args.turns, args.repeat)


if __name__ == "__main__":
    main()
