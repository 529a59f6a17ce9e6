"""The call's requested model copied onto its responses and HTTP attempts
(schema 7), so aggregate reports group by (run, model) off one covering index
instead of joining ``model_calls`` for every call.

The copy is left out of the hashed row form (``store.chain.COPIES``): rows
written before it existed keep their links. It is checked against the call
row it was copied from instead, which is chained; a copy that differs, or is
missing, fails verification. The writer fills it (``fill``); migration 7
(``store.schema.migrations``) adds and backfills it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, select

from store.chain import COPIES, ChainCheck, ChainRow
from store.schema.tables import CallAttempt, ModelCall, ModelResponse, table_of

MODEL = "gen_ai.request.model"
CALLS: Table = table_of(ModelCall)
TABLES: tuple[Table, ...] = (table_of(ModelResponse), table_of(CallAttempt))
assert all(MODEL in COPIES[t.name] for t in TABLES)


def fill(conn: Connection, table: Table, rows: Sequence[dict[str, Any]], written: Iterable[Mapping[str, Any]]) -> None:
    """Give response and attempt rows their call's model: from a call row
    written in the same transaction, else from the store."""
    if table not in TABLES or not rows:
        return
    models = {r["id"]: r[MODEL] for r in written if MODEL in r and "request_sha256" in r}
    wanted = {r["call_id"] for r in rows} - models.keys()
    if wanted:
        models.update((i, m) for i, m in conn.execute(select(CALLS.c.id, CALLS.c[MODEL]).where(CALLS.c.id.in_(wanted))))
    for row in rows:
        row[MODEL] = models.get(row["call_id"])


def problems(rows: Iterable[ChainRow]) -> dict[str, tuple[str, str, str]]:
    """Per run, the first response or attempt whose copied model is not its
    call's, NULL included: (table, row id, problem)."""
    calls = {r.row["id"]: r.row.get(MODEL) for r in rows if r.table == CALLS.name}
    found: dict[str, tuple[str, str, str]] = {}
    names = {t.name for t in TABLES}
    for item in sorted((r for r in rows if r.table in names), key=lambda r: r.seq):
        row, run_id = item.row, str(item.row.get("run_id"))
        if MODEL not in row:
            continue  # read from a store older than the copy (schema < 7)
        expected = calls.get(row.get("call_id"))
        if row.get(MODEL) != expected and run_id not in found:
            found[run_id] = (item.table, str(row.get("id")), f"{item.table} {row.get('id')} says model "
                             f"{row.get(MODEL)!r}, its call {row.get('call_id')} requested {expected!r}")
    return found


def flag(checks: Iterable[ChainCheck], found: dict[str, tuple[str, str, str]]) -> list[ChainCheck]:
    """Mark runs with a wrong copy (a broken chain keeps its own problem)."""
    out = []
    for check in checks:
        if check.ok and check.run_id in found:
            table, row_id, problem = found[check.run_id]
            check = check.model_copy(update={"ok": False, "problem": problem, "table": table, "row_id": row_id})
        out.append(check)
    return out
