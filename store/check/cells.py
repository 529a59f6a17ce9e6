"""Checking the cells read back from the store against their columns' types.

SQLite stores whatever a cell is given (a BLOB in a TEXT column, 'abc' in a
REAL one), so a damaged or hand-edited store reads back values that crash
hashing and the frozen views far from the cause. Every read path checks the
rows it reads here first and raises ``StoreDamaged`` naming table, row and
column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Connection, Float, Integer, Table, func, or_, select

from store.errors import StoreDamaged

_TEXT: tuple[type, ...] = (str,)
_INTEGER: tuple[type, ...] = (int,)
_REAL: tuple[type, ...] = (float, int)
_SQL_TYPE = {_TEXT: "TEXT", _INTEGER: "INTEGER", _REAL: "REAL"}


@cache
def _expected(table: Table) -> dict[str, tuple[type, ...]]:
    out = {}
    for column in table.columns:
        if isinstance(column.type, Float):
            out[column.name] = _REAL
        elif isinstance(column.type, Integer):
            out[column.name] = _INTEGER
        else:
            out[column.name] = _TEXT
    return out


def _kind(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"a BLOB of {len(value)} bytes"
    if isinstance(value, str):
        return f"text {value[:40]!r}"
    return f"{type(value).__name__} {value!r}"


def check_row(table: Table, row: Mapping[Any, Any]) -> None:
    """Raise StoreDamaged for the first cell whose value its column cannot hold."""
    expected = _expected(table)
    for name, value in row.items():
        allowed = expected.get(name)
        if value is None or allowed is None:
            continue
        if isinstance(value, bool) or not isinstance(value, allowed):
            row_id = row.get("id", row.get("version", "?"))
            raise StoreDamaged(
                f"damaged store: {table.name} row {row_id} column {name} holds {_kind(value)}, "
                f"not {_SQL_TYPE[allowed]}", table=table.name, row_id=str(row_id), column=name)


def check_numbers(conn: Connection, table: Table, where: Any, columns: Sequence[str] | None = None) -> None:
    """SQL sums skip over text silently (SQLite adds 'abc' as 0): before
    summing ``table``'s numeric columns over the rows ``where`` selects, find
    a cell that is not a number. Only SQLite stores such cells."""
    if conn.dialect.name != "sqlite":
        return
    numeric = _numeric(table, columns)
    found = (
        conn.execute(select(table.c.id, *numeric).where(where, not_a_number(table, columns)).limit(1))
        .mappings()
        .first()
    )
    if found is not None:
        check_row(table, found)


def _numeric(table: Table, columns: Sequence[str] | None) -> list[Any]:
    return [
        c for c in table.columns if _expected(table)[c.name] is not _TEXT and (columns is None or c.name in columns)
    ]


def not_a_number(table: Table, columns: Sequence[str] | None = None) -> Any:
    """SQLite: true for a row one of whose numeric ``columns`` holds something
    else. An aggregate query folds it into its own scan (``max`` of it), then
    calls ``check_numbers`` for the details only when it is set."""
    return or_(*(func.typeof(c).not_in(("integer", "real", "null")) for c in _numeric(table, columns)))
