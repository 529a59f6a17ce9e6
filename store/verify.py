"""Checking recorded runs against their hash chains."""

from __future__ import annotations

import json
from sqlalchemy import Connection, Table, select

from store.chain import ChainCheck, ChainRow, check_chain
from store.recorder import VERDICT_EVENT
from store.tables import CHAINED, EventRow, Run

RUNS: Table = Run.__table__  # type: ignore[assignment]


def verify_run(conn: Connection, run_id: str) -> ChainCheck:
    run_row = conn.execute(select(RUNS).where(RUNS.c.id == run_id)).mappings().first()
    if run_row is None:
        return ChainCheck(run_id=run_id, ok=False, rows=0, head="", problem="run row is missing")
    rows = []
    for model in CHAINED:
        t: Table = model.__table__  # type: ignore[attr-defined]
        rows += [ChainRow(table=t.name, row=dict(r)) for r in conn.execute(select(t).where(t.c.run_id == run_id)).mappings()]
    checked = check_chain(run_row, rows)
    if not checked.ok:
        return checked
    problem = verdict_problem(dict(run_row), [r.row for r in rows if r.table == EventRow.__tablename__ and r.row["kind"] == VERDICT_EVENT])
    return checked.model_copy(update={"ok": False, "problem": problem}) if problem else checked


def verdict_problem(run_row: dict, verdict_events: list[dict]) -> str | None:
    """The run row's mutable columns must agree with its (chained) verdict event."""
    if not verdict_events:
        expected = {"status": "running", "verdict": None, "verdict_detail": None, "finished_at": None}
    else:
        last = max(verdict_events, key=lambda r: r["seq"])
        data = json.loads(last["data_json"])
        expected = {"status": "finished", "verdict": data.get("verdict"), "verdict_detail": data.get("detail"), "finished_at": last["at"]}
    for column, value in expected.items():
        if run_row.get(column) != value:
            return f"run column {column} is {run_row.get(column)!r}, the chained record says {value!r}"
    return None


def all_run_ids(conn: Connection) -> list[str]:
    return [str(r) for r in conn.execute(select(RUNS.c.id).order_by(RUNS.c.created_at, RUNS.c.id)).scalars()]


def orphans(conn: Connection) -> list[ChainCheck]:
    """Chained rows whose run row is gone: a deleted or renamed run."""
    found = []
    known = select(RUNS.c.id)
    for model in CHAINED:
        t: Table = model.__table__  # type: ignore[attr-defined]
        for run_id in conn.execute(select(t.c.run_id).where(t.c.run_id.not_in(known)).distinct()).scalars():
            found.append(ChainCheck(run_id=str(run_id), ok=False, rows=0, head="", problem=f"run row is missing; {t.name} rows still refer to it", table=t.name))
    return found
