"""Appending rows to a run's hash chain inside one write transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Table, select, update

from store.chain import link
from store.errors import RecordingError
from store.read import run_totals
from store.schema.tables import Run, table_of
from store.write import model_column, totals_write
from store.write.rows import Pending, normalise

RUNS: Table = table_of(Run)
Chained = tuple[Table, dict[str, Any]]


def chain_position(conn: Connection, run_id: str) -> tuple[int, str]:
    """The run's current (seq, head), locked for this transaction. On SQLite
    BEGIN IMMEDIATE already holds the write lock; PostgreSQL locks the row."""
    stmt = select(RUNS.c.chain_seq, RUNS.c.chain_head, RUNS.c.status).where(RUNS.c.id == run_id)
    if conn.dialect.name != "sqlite":
        stmt = stmt.with_for_update()
    found = conn.execute(stmt).first()
    if found is None:
        raise RecordingError(f"no run {run_id} in the store", run_id=run_id)
    return int(found.chain_seq), str(found.chain_head)


def chained(run_id: str, seq: int, head: str, pending: Sequence[Pending]) -> tuple[list[Chained], int, str]:
    """Pure: each pending row with the next ``seq`` and its link after
    (``seq``, ``head``); returns them and the new position."""
    out = []
    for table, values in pending:
        seq += 1
        row = normalise(table, {**values, "run_id": run_id, "seq": seq})
        head = link(head, table.name, row)
        row["chain_hash"] = head
        out.append((table, row))
    return out, seq, head


def insert_chained(conn: Connection, rows: Sequence[Chained]) -> None:
    """Insert chained rows, one statement per table however many runs and
    rows they hold (their model copies filled first)."""
    grouped: dict[Table, list[dict[str, Any]]] = {}
    # Grouping by a table's first appearance keeps foreign keys satisfied:
    # a row only ever refers to rows of tables that appeared before it, in
    # its own run, so also in rows of many runs put one after another.
    for table, row in rows:
        grouped.setdefault(table, []).append(row)
    written = [row for _, row in rows]
    for table, group in grouped.items():
        model_column.fill(conn, table, group, written)  # a copy, outside the hashed form
        conn.execute(table.insert(), group)


def append(
    conn: Connection, run_id: str, pending: Sequence[Pending], run_update: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Give each pending row the next ``seq`` and its link, insert them, and
    move the run's head. Returns the rows as written."""
    seq, old_head = chain_position(conn, run_id)
    rows, seq, head = chained(run_id, seq, old_head, pending)
    insert_chained(conn, rows)
    conn.execute(update(RUNS).where(RUNS.c.id == run_id).values(chain_seq=seq, chain_head=head, **(run_update or {})))
    # Derived, not chained: what reports sum over a finished run, kept in step
    # with any row appended after it finished (its digest is of the chain
    # head, which any row moves on). Rows that no total sums only move that
    # head: recomputing the sums for each of them was most of a teacher
    # scoring's time (bench_teacher).
    if (run_update or {}).get("status") == "finished":
        totals_write.write(conn, [run_id])
    elif run_totals.has_any(conn, run_id):
        summed = any(table.name in run_totals.SUMMED_TABLES for table, _ in rows)
        if run_update or summed or not totals_write.rehead(conn, run_id, old_head, head):
            totals_write.write(conn, [run_id])
    return [row for _, row in rows]
