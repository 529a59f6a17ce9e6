"""Checking recorded runs against their hash chains: loading (I/O) and the
checks themselves (pure, over plain row dicts)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Connection, Table, select

from store.chain import VERDICT_EVENT, ChainCheck, ChainRow, check_chain
from store.check import blob_check, token_check, totals_check
from store.check.cells import check_row
from store.read import run_totals, ttft_days
from store.schema.tables import CHAINED, EventRow, Run, table_of
from store.write import model_column

RUNS: Table = table_of(Run)


def check_run(run_row: Mapping[str, Any], rows: list[ChainRow]) -> ChainCheck:
    """The chain, then the run row's mutable columns against its verdict event."""
    checked = check_chain(run_row, rows)
    if not checked.ok:
        return checked
    verdicts = [r.row for r in rows if r.table == EventRow.__tablename__ and r.row.get("kind") == VERDICT_EVENT]
    problem = verdict_problem(run_row, verdicts)
    return checked.model_copy(update={"ok": False, "problem": problem}) if problem else checked


def check_records(run_rows: Iterable[Mapping[str, Any]], rows: Iterable[ChainRow]) -> list[ChainCheck]:
    """Every run's chain and the models copied from its calls, then rows whose
    run row is gone (a deleted or renamed run)."""
    rows = list(rows)
    copies = model_column.problems(rows)
    by_run: dict[Any, list[ChainRow]] = defaultdict(list)
    for item in rows:
        by_run[item.row.get("run_id")].append(item)
    checks, known = [], set()
    for run_row in run_rows:
        known.add(run_row["id"])
        checks += model_column.flag([check_run(run_row, by_run.get(run_row["id"], []))], copies)
    for run_id, left in by_run.items():
        if run_id not in known:
            tables = sorted({r.table for r in left})
            checks.append(ChainCheck(run_id=str(run_id), ok=False, rows=len(left), head="", table=tables[0],
                                     problem=f"run row is missing; {', '.join(tables)} rows still refer to it"))
    return checks


def verdict_problem(run_row: Mapping[str, Any], verdict_events: list[dict[str, Any]]) -> str | None:
    if not verdict_events:
        expected = {"status": "running", "verdict": None, "verdict_detail": None, "finished_at": None}
    else:
        last = max(verdict_events, key=lambda r: r["seq"])
        try:
            data = json.loads(last["data_json"])
        except (TypeError, ValueError):
            return "the verdict event's data is not JSON"
        expected = {
            "status": "finished",
            "verdict": data.get("verdict"),
            "verdict_detail": data.get("detail"),
            "finished_at": last["at"],
        }
    for column, value in expected.items():
        if run_row.get(column) != value:
            return f"run column {column} is {run_row.get(column)!r}, the chained record says {value!r}"
    return None


def load(conn: Connection, run_id: str | None = None) -> tuple[list[dict[str, Any]], list[ChainRow]]:
    """Run rows and chained rows, of one run or of the whole store."""
    runs_stmt = select(RUNS).order_by(RUNS.c.created_at, RUNS.c.id)
    if run_id is not None:
        runs_stmt = runs_stmt.where(RUNS.c.id == run_id)
    run_rows = [checked(RUNS, r) for r in conn.execute(runs_stmt).mappings()]
    rows = []
    for model in CHAINED:
        t: Table = table_of(model)
        stmt = select(t) if run_id is None else select(t).where(t.c.run_id == run_id)
        rows += [ChainRow(table=t.name, row=checked(t, r)) for r in conn.execute(stmt).mappings()]
    return run_rows, rows


def checked(table: Table, row: Mapping[Any, Any]) -> dict[str, Any]:
    check_row(table, row)
    return dict(row)


def verify_run(conn: Connection, run_id: str) -> ChainCheck | None:
    """None when nothing at all is recorded under ``run_id``."""
    checks = _checked(conn, *load(conn, run_id), run_id)
    return checks[0] if checks else None


def verify_all(conn: Connection) -> list[ChainCheck]:
    return _checked(conn, *load(conn), None)


def _checked(conn: Connection, run_rows: list[dict[str, Any]], rows: list[ChainRow],
             run_id: str | None) -> list[ChainCheck]:
    """Chains over the rows as hashed (request text reassembled where a link
    covers it), then the blobs each run uses, then its stored totals against
    its rows (derived data: a mismatch is a changed total or a changed row)."""
    hashed, blob_problems = blob_check.prepare(conn, rows)
    checks = blob_check.flag(check_records(run_rows, hashed), blob_problems)
    totals = totals_check.problems(conn, run_id)
    days = ttft_days.problems(conn, run_id, explained=totals)
    tokens = token_check.problems(rows)

    def derived(c: ChainCheck) -> ChainCheck:
        if c.ok and c.run_id in tokens and c.run_id not in totals and c.run_id not in days:
            row_id, problem = tokens[c.run_id]
            return c.model_copy(update={"ok": False, "table": token_check.RESPONSES, "row_id": row_id,
                                        "problem": problem})
        if not c.ok or (c.run_id not in totals and c.run_id not in days):
            return c
        if c.run_id in totals:
            return c.model_copy(update={"ok": False, "table": run_totals.TOTALS.name, "problem": totals[c.run_id]})
        row_id, problem = days[c.run_id]
        return c.model_copy(update={"ok": False, "table": ttft_days.DAYS.name, "row_id": row_id, "problem": problem})

    return [derived(c) for c in checks]
