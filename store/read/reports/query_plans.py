"""SQLite's EXPLAIN QUERY PLAN of each aggregate report query, for the bench."""

from __future__ import annotations

from store.read import run_totals
from store.read.reports.aggregate_query import totals_query
from store.read.reports.report_window import window
from store.read.reports.ttft_histogram import ttft_queries
from store.store import Store


def query_plans(store: Store, since: float | None, until: float | None, raw: bool = False) -> dict[str, list[str]]:
    """SQLite's EXPLAIN QUERY PLAN of each report query (for the bench): the
    stored totals', or, ``raw``, those of the queries over the rows."""
    if raw:
        queries = {**run_totals.queries(window(since, until), "sqlite"),
                   "ttft": ttft_queries(since, until, "model", "sqlite", raw=True)["from_rows"]}
    else:
        ttft = ttft_queries(since, until, "model", "sqlite")
        queries = {"totals": totals_query(since, until),
                   **{f"ttft {name}": ttft[name] for name in ("days", "stored") if name in ttft}}
    plans: dict[str, list[str]] = {}
    with store.read() as conn:
        for name, query in queries.items():
            compiled = query.compile(conn, compile_kwargs={"render_postcompile": True})
            params = tuple(compiled.params[key] for key in compiled.positiontup or ())
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}", params).all()
            plans[name] = [str(row[-1]) for row in rows]
    return plans
