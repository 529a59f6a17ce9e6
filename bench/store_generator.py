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

    .venv/bin/python bench/store_generator.py PATH --runs 100000 [--calls-per-run 100]
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

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


def overrides(table: str, calls: int, first_at: float, spacing: float) -> dict[str, str]:
    """SQL expressions over ``r.n`` (the run) and ``t.k`` (the turn) for the
    columns that vary; every other column keeps its template value."""
    run_id = "printf('g%031d', r.n)"
    call_id = "printf('g%031dc%05d', r.n, t.k)"
    created = f"({first_at!r} + r.n * {spacing!r})"
    model = _model_case("r.n")
    per_turn = {"run_id": run_id, "turn": "t.k", "chain_hash": f"'{PLACEHOLDER_HASH}'"}
    prompt = "(900 + 150 * t.k)"
    if table == "runs":
        return {
            "id": run_id, "created_at": created, "finished_at": f"{created} + 600",
            "gen_ai.request.model": model, "task": "'task ' || r.n", "status": "'finished'",
            "verdict": "(CASE abs(random()) % 3 WHEN 0 THEN 'PASS' WHEN 1 THEN 'BUDGET_EXHAUSTED' ELSE 'FAULTED' END)",
            "verdict_detail": "'generated'", "chain_seq": str(ROWS_PER_TURN * calls + 1),
            "chain_head": f"'{PLACEHOLDER_HASH}'",
        }
    if table == "model_calls":
        return {**per_turn, "id": call_id, "seq": f"{ROWS_PER_TURN} * t.k + 1", "created_at": f"{created} + t.k",
                "gen_ai.request.model": model}
    if table == "model_responses":
        ttft = f"(0.05 + {prompt} * 0.00002 + (abs(random()) % 10000) / 1000000.0)"
        return {
            **per_turn, "id": call_id + " || 'r'", "call_id": call_id, "seq": f"{ROWS_PER_TURN} * t.k + 2",
            "recorded_at": f"{created} + t.k + 0.5", "gen_ai.usage.input_tokens": prompt,
            "gen_ai.usage.cache_read.input_tokens": f"({prompt} - 150)",
            "gen_ai.usage.output_tokens": "(20 + abs(random()) % 180)",
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
        return {"id": "printf('g%031dv', r.n)", "run_id": run_id, "turn": str(calls),
                "seq": str(ROWS_PER_TURN * calls + 1), "at": f"{created} + 600",
                "chain_hash": f"'{PLACEHOLDER_HASH}'"}
    raise ValueError(table)


def fill(conn: sqlite3.Connection, table: str, template: dict[str, Any], exprs: dict[str, str]) -> None:
    columns = list(template)
    values, params = [], []
    for column in columns:
        if column in exprs:
            values.append(exprs[column])
        else:
            values.append("?")
            params.append(template[column])
    per_run = table in ("runs", "events")
    source = "counter_runs r" if per_run else "counter_runs r CROSS JOIN counter_turns t"
    quoted = ", ".join(f'"{c}"' for c in columns)
    conn.execute(f"INSERT INTO {table} ({quoted}) SELECT {', '.join(values)} FROM {source}", params)


def generate_sql(path: Path, runs: int, calls_per_run: int = 100, days: float = 90.0,
                 log: Any = print) -> None:
    """A store of ``runs`` runs x ``calls_per_run`` calls at ``path`` (which must not exist)."""
    if path.exists():
        raise FileExistsError(path)
    with tempfile.TemporaryDirectory() as tmp:
        templates = template_rows(Path(tmp) / "templates.db")
    Store.open(f"sqlite:///{path}").close()  # the schema this Escrow writes, migrations stamped
    first_at = time.time() - days * DAY
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA synchronous = OFF")
        indexes = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN "
            f"({', '.join('?' * len(TABLES))})", TABLES).fetchall()
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{name}"')
        conn.execute("CREATE TEMP TABLE counter_runs (n INTEGER PRIMARY KEY)")
        conn.execute("CREATE TEMP TABLE counter_turns (k INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO counter_runs WITH RECURSIVE c(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM c "
                     f"WHERE n + 1 < {runs}) SELECT n FROM c")
        conn.execute("INSERT INTO counter_turns WITH RECURSIVE c(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM c "
                     f"WHERE k + 1 < {calls_per_run}) SELECT k FROM c")
        for table in TABLES:
            started = time.perf_counter()
            conn.execute("BEGIN")
            fill(conn, table, templates[table], overrides(table, calls_per_run, first_at, days * DAY / runs))
            conn.execute("COMMIT")
            log(f"  {table}: filled in {time.perf_counter() - started:.0f} s")
        started = time.perf_counter()
        for _, sql in indexes:
            conn.execute(sql)
        log(f"  {len(indexes)} indexes rebuilt in {time.perf_counter() - started:.0f} s")
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--calls-per-run", type=int, default=100)
    args = parser.parse_args()
    started = time.perf_counter()
    generate_sql(args.path, args.runs, args.calls_per_run)
    print(f"generated {args.runs} runs x {args.calls_per_run} calls in {time.perf_counter() - started:.0f} s, "
          f"{args.path.stat().st_size / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
