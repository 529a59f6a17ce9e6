"""The migration to content-addressed requests (schema 4), self-contained so
its number can change without touching it: ``add_columns`` is idempotent and
``convert_requests`` commits in batches, so an upgrade killed at any point
resumes where it stopped.

A converted row keeps its ``chain_hash``: its link was computed over the
whole ``request_json``, so the row says ``request_hashed_as = 'request_json'``
and verify reassembles the text to check it. A row whose reassembly would not
give its stored text byte for byte is left as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection, Engine, Table, and_, inspect, or_, select, text, update

from orchestrator.canonical import canonical_json
from store import blobs
from store.blobs import History
from store.tables import Blob, Deletion, ModelCall, table_of

CALLS: Table = table_of(ModelCall)
NEW_COLUMNS = ("request_body", "request_refs", "request_hashed_as")
BATCH_ROWS = 200


def add_columns(conn: Connection) -> None:
    """The blobs and deletions tables and the request's reference columns (all nullable)."""
    table_of(Blob).create(conn, checkfirst=True)
    table_of(Deletion).create(conn, checkfirst=True)
    present = {c["name"] for c in inspect(conn).get_columns(CALLS.name)}
    for name in NEW_COLUMNS:
        if name not in present:
            conn.execute(
                text(
                    f"ALTER TABLE {CALLS.name} ADD COLUMN {name} {'VARCHAR' if name == 'request_hashed_as' else 'TEXT'}"
                )
            )


def convert_requests(engine: Engine, batch_rows: int | None = None) -> None:
    """Move every stored request text into blobs, a batch per transaction, in
    ``(run_id, seq)`` order so that a run's requests share their nodes."""
    limit = batch_rows or BATCH_ROWS
    histories: dict[str, History] = {}
    after: tuple[str, int] = ("", -1)
    while True:
        with engine.begin() as conn:
            rows = list(_pending(conn, after, limit))
            if not rows:
                return
            for row in rows:
                converted = _converted(row, histories.get(row.run_id))
                if converted is None:
                    continue
                values, new_blobs, histories[row.run_id] = converted
                blobs.put(conn, new_blobs)
                conn.execute(update(CALLS).where(CALLS.c.id == row.id).values(**values))
            after = (rows[-1].run_id, rows[-1].seq)


def _pending(conn: Connection, after: tuple[str, int], limit: int) -> Iterator[Any]:
    run_id, seq = after
    stmt = (
        select(CALLS.c.id, CALLS.c.run_id, CALLS.c.seq, CALLS.c.request_json)
        .where(
            CALLS.c.request_refs.is_(None),
            or_(CALLS.c.run_id > run_id, and_(CALLS.c.run_id == run_id, CALLS.c.seq > seq)),
        )
        .order_by(CALLS.c.run_id, CALLS.c.seq)
        .limit(limit)
    )
    yield from conn.execute(stmt)


def _converted(row: Any, previous: History | None) -> tuple[dict[str, Any], dict[str, str], History] | None:
    """The row's new columns and blobs; None when it stays as it is. Reassembly
    is ``canonical_json`` of the parsed parts, so it gives the stored text back
    exactly when that text is itself canonical JSON."""
    try:
        parsed = json.loads(row.request_json)
    except (TypeError, ValueError):
        return None
    if not isinstance(parsed, dict) or canonical_json(parsed) != row.request_json:
        return None
    parts = blobs.split(parsed, previous)
    if parts is None or parts.history is None:
        return None
    values = {
        "request_json": "",
        "request_body": parts.body,
        "request_refs": parts.refs,
        "request_hashed_as": blobs.HASHED_AS_TEXT,
    }
    return values, parts.blobs, parts.history
