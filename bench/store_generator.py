"""A large store generated inside SQLite, for timing fleet reports at 10M calls.

bench/bench_store.py's ``generate`` builds every row in Python and hashes
each chain: 1M calls took 37 minutes on the 2-core machine, so 10M calls
would take hours. Here one real row of each table, recorded through the
Recorder (``bench_store.template_rows``), is the template, and each table is
filled by one ``INSERT ... SELECT`` over a run counter and a turn counter,
with the secondary indexes dropped during the load and rebuilt after it.

What differs from a recorded store, and why it does not matter to the
reports timed on it: every row's ``chain_hash`` and every run's
``chain_head`` is the same placeholder (reports never read chains; ``escrow
verify`` on this store fails, as it should). The figures vary the way real
ones do: prompt tokens grow by 150 a turn, the cached part trails them, the
output is 20 to 199 tokens, and the TTFT grows with the prompt plus a
jitter of up to 10 ms, so nearly every call's TTFT differs at millisecond
resolution (as on a real server, where prefill time follows prompt size).

    .venv/bin/python bench/store_generator.py URL --runs 100000 [--calls-per-run 100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, create_engine, text

sys.path.insert(0, str(Path(__file__).parent))
from bench_store import MODELS, template_rows  # noqa: E402  (one set of templates for both generators)

from store import Store  # noqa: E402

PLACEHOLDER_HASH = "0" * 64
DAY = 86400.0
TABLES = ("runs", "model_calls", "model_responses", "call_attempts", "turns", "events")
ROWS_PER_TURN = 4


def _model_case(n: str) -> str:
    arms = " ".join(f"WHEN {i} THEN '{m}'" for i, m in enumerate(MODELS))
    return f"(CASE {n} % {len(MODELS)} {arms} END)"


def _random_below(limit: int, dialect: str) -> str:
    return f"(abs(random()) % {limit})" if dialect == "sqlite" else f"(floor(random() * {limit})::int)"


def _padded(expr: str, width: int, dialect: str) -> str:
    return f"printf('%0{width}d', {expr})" if dialect == "sqlite" else f"lpad(({expr})::text, {width}, '0')"


def overrides(table: str, calls: int, first_at: float, spacing: float, dialect: str = "sqlite") -> dict[str, str]:
    """SQL expressions over ``r.n`` (the run) and ``t.k`` (the turn) for the
    columns that vary; every other column keeps its template value."""
    run_id = f"('g' || {_padded('r.n', 31, dialect)})"
    call_id = f"({run_id} || 'c' || {_padded('t.k', 5, dialect)})"
    created = f"({first_at!r} + r.n * {spacing!r})"
    model = _model_case("r.n")
    per_turn = {"run_id": run_id, "turn": "t.k", "chain_hash": f"'{PLACEHOLDER_HASH}'"}
    prompt = "(900 + 150 * t.k)"
    if table == "runs":
        return {
            "id": run_id, "created_at": created, "finished_at": f"{created} + 600",
            "gen_ai.request.model": model, "task": "'task ' || r.n", "status": "'finished'",
            "verdict": f"(CASE {_random_below(3, dialect)} WHEN 0 THEN 'PASS' WHEN 1 THEN 'BUDGET_EXHAUSTED' "
                       "ELSE 'FAULTED' END)",
            "verdict_detail": "'generated'", "chain_seq": str(ROWS_PER_TURN * calls + 1),
            "chain_head": f"'{PLACEHOLDER_HASH}'",
        }
    if table == "model_calls":
        return {**per_turn, "id": call_id, "seq": f"{ROWS_PER_TURN} * t.k + 1", "created_at": f"{created} + t.k",
                "gen_ai.request.model": model}
    if table == "model_responses":
        ttft = f"(0.05 + {prompt} * 0.00002 + {_random_below(10000, dialect)} / 1000000.0)"
        return {
            **per_turn, "id": call_id + " || 'r'", "call_id": call_id, "seq": f"{ROWS_PER_TURN} * t.k + 2",
            "recorded_at": f"{created} + t.k + 0.5", "gen_ai.usage.input_tokens": prompt,
            "gen_ai.usage.cache_read.input_tokens": f"({prompt} - 150)",
            "gen_ai.usage.output_tokens": f"(20 + {_random_below(180, dialect)})",
            "ttft_s": ttft, "decode_s": "0.3", "total_s": f"({ttft} + 0.3)", "n_attempts": "1",
            "gen_ai.request.model": model,
        }
    if table == "call_attempts":
        return {**per_turn, "id": call_id + " || 'a'", "call_id": call_id, "seq": f"{ROWS_PER_TURN} * t.k + 3",
                "gen_ai.request.model": model, "number": "1", "status": "'COMPLETED'", "http_status": "200",
                "duration_s": "0.4", "backoff_s": "0.0"}
    if table == "turns":
        return {**per_turn, "id": call_id + " || 't'", "seq": f"{ROWS_PER_TURN} * t.k + 4",
                "committed_at": f"{created} + t.k + 0.9"}
    if table == "events":  # the verdict event closing each run
        return {"id": f"({run_id} || 'v')", "run_id": run_id, "turn": str(calls),
                "seq": str(ROWS_PER_TURN * calls + 1), "at": f"{created} + 600",
                "chain_hash": f"'{PLACEHOLDER_HASH}'"}
    raise ValueError(table)


def fill(conn: Connection, table: str, template: dict[str, Any], exprs: dict[str, str]) -> None:
    columns = list(template)
    values, params = [], {}
    for index, column in enumerate(columns):
        if column in exprs:
            values.append(exprs[column])
        else:
            values.append(f":p{index}")
            params[f"p{index}"] = template[column]
    per_run = table in ("runs", "events")
    source = "counter_runs r" if per_run else "counter_runs r CROSS JOIN counter_turns t"
    quoted = ", ".join(f'"{c}"' for c in columns)
    conn.execute(text(f"INSERT INTO {table} ({quoted}) SELECT {', '.join(values)} FROM {source}"), params)


def _secondary_indexes(conn: Connection) -> list[tuple[str, str]]:
    """(name, CREATE statement) of the tables' indexes that back no constraint."""
    if conn.dialect.name == "sqlite":
        listed = ", ".join(f"'{t}'" for t in TABLES)
        rows = conn.execute(text(f"SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                                 f"AND tbl_name IN ({listed})"))
    else:
        listed = ", ".join(f"'{t}'" for t in TABLES)
        rows = conn.execute(text(f"SELECT indexname, indexdef FROM pg_indexes i WHERE tablename IN ({listed}) "
                                 "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)"))
    return [(name, sql) for name, sql in rows]


def _counters(conn: Connection, runs: int, calls_per_run: int) -> None:
    for name, column, size in (("counter_runs", "n", runs), ("counter_turns", "k", calls_per_run)):
        if conn.dialect.name == "sqlite":
            conn.execute(text(f"CREATE TEMP TABLE {name} ({column} INTEGER PRIMARY KEY)"))
            conn.execute(text(f"INSERT INTO {name} WITH RECURSIVE c(v) AS (SELECT 0 UNION ALL SELECT v + 1 FROM c "
                              f"WHERE v + 1 < {size}) SELECT v FROM c"))
        else:
            conn.execute(text(f"CREATE TEMP TABLE {name} AS SELECT generate_series(0, {size - 1}) AS {column}"))


def generate_sql(url: str, runs: int, calls_per_run: int = 100, days: float = 90.0, log: Any = print) -> None:
    """A store of ``runs`` runs x ``calls_per_run`` calls at ``url`` (a
    SQLite file that must not exist, or an empty PostgreSQL database)."""
    with tempfile.TemporaryDirectory() as tmp:
        templates = template_rows(Path(tmp) / "templates.db")
    with Store.open(url) as store:  # the schema this Escrow writes, migrations stamped
        if store.runs(limit=1):
            raise FileExistsError(f"{url} already holds runs")
    first_at = time.time() - days * DAY
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            dialect = conn.dialect.name
            if dialect == "sqlite":
                # A rollback journal, not the WAL: new pages need no journal, so a
                # table of 10M rows is written once rather than WAL first, then the file.
                conn.execute(text("PRAGMA journal_mode = DELETE"))
                conn.execute(text("PRAGMA synchronous = OFF"))
            indexes = _secondary_indexes(conn)
            for name, _ in indexes:
                conn.execute(text(f'DROP INDEX "{name}"'))
            _counters(conn, runs, calls_per_run)
            for table in TABLES:
                started = time.perf_counter()
                exprs = overrides(table, calls_per_run, first_at, days * DAY / runs, dialect)
                fill(conn, table, templates[table], exprs)  # one statement: its own transaction
                log(f"  {table}: filled in {time.perf_counter() - started:.0f} s")
            started = time.perf_counter()
            for _, sql in indexes:
                conn.execute(text(sql))
            log(f"  {len(indexes)} indexes rebuilt in {time.perf_counter() - started:.0f} s")
            conn.execute(text("ANALYZE"))
            if dialect == "sqlite":
                conn.execute(text("PRAGMA journal_mode = WAL"))
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", help="sqlite:///NEW-FILE or an empty PostgreSQL database's URL")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--calls-per-run", type=int, default=100)
    args = parser.parse_args()
    started = time.perf_counter()
    generate_sql(args.url, args.runs, args.calls_per_run)
    print(f"generated {args.runs} runs x {args.calls_per_run} calls in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
