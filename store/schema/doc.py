"""docs/SCHEMA.md's generated section: every table of a store with its
columns, their SQL types (as SQLite's DDL names them), whether they take
NULL, and their keys, read off the models in ``store.schema.tables``. A test
compares the page with it (tests/store/test_schema_doc.py); after a schema
change, ``python -m store.schema.doc docs/SCHEMA.md`` rewrites the section."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from sqlalchemy import Column, Table
from sqlalchemy.dialects import sqlite

from store.schema.migrations import store_tables
from store.schema.tables import MIGRATION_LOG

BEGIN = "<!-- schema-tables:begin -->"
END = "<!-- schema-tables:end -->"


def every_table() -> list[Table]:
    """The tables a new store is created with, and its migration log."""
    return [*store_tables(), MIGRATION_LOG]


def _key(column: Column) -> str:
    keys = ["PK"] if column.primary_key else []
    keys += [f"FK {fk.target_fullname}" for fk in sorted(column.foreign_keys, key=lambda fk: fk.target_fullname)]
    return ", ".join(keys)


def markdown_tables(tables: Iterable[Table]) -> str:
    """One markdown table per store table, in the given order."""
    dialect = sqlite.dialect()
    blocks = []
    for table in tables:
        lines = [f"`{table.name}`", "", "| column | type | NULL | key |", "|---|---|---|---|"]
        for column in table.columns:
            null = "yes" if column.nullable else "no"
            lines.append(f"| {column.name} | {column.type.compile(dialect=dialect)} | {null} | {_key(column)} |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def section(page: str) -> str:
    """What ``page`` holds between the markers."""
    return page.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def rewritten(page: str) -> str:
    """``page`` with the generated section replaced by the models' tables."""
    before, rest = page.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    return f"{before}{BEGIN}\n{markdown_tables(every_table())}\n{END}{after}"


if __name__ == "__main__":
    path = Path(sys.argv[1])
    path.write_text(rewritten(path.read_text()))
