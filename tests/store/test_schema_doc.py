"""docs/SCHEMA.md prints every table, column and type of a store as the
models declare them (a generated section, as docs/ARCHITECTURE.md prints the
exit codes), the models are what a new store's DDL holds, and every table
model lives in store/schema/tables.py."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

from sqlalchemy import create_engine, inspect
from sqlmodel import SQLModel

import store
from store.schema.doc import every_table, markdown_tables, section
from store.schema.migrations import create_latest

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| (?P<column>[^|]+) \| (?P<type>[^|]+) \| (?P<null>yes|no) \| [^|]* \|$")


def documented(page: str) -> dict[str, dict[str, tuple[str, bool]]]:
    """Per table the page's section names, its columns' (type, nullable)."""
    tables: dict[str, dict[str, tuple[str, bool]]] = {}
    current: dict[str, tuple[str, bool]] = {}
    for line in section(page).splitlines():
        if line.startswith("`"):
            current = tables.setdefault(line.strip("`"), {})
        elif (row := ROW.match(line)) and row["column"] != "column":
            current[row["column"]] = (row["type"], row["null"] == "yes")
    return tables


def test_the_schema_page_prints_the_generated_tables():
    page = (ROOT / "docs" / "SCHEMA.md").read_text()
    assert section(page) == markdown_tables(every_table())


def test_the_page_names_every_table_column_and_type_a_new_store_has(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'new.db'}")
    create_latest(engine)
    on_disk = inspect(engine)
    have = {
        name: {c["name"]: (str(c["type"]), bool(c["nullable"])) for c in on_disk.get_columns(name)}
        for name in on_disk.get_table_names()
    }
    engine.dispose()
    assert documented((ROOT / "docs" / "SCHEMA.md").read_text()) == have


def test_every_table_model_is_in_store_tables():
    for info in pkgutil.walk_packages(store.__path__, "store."):
        importlib.import_module(info.name)  # every module that could declare a model
    homes = {table.name: {m.class_.__module__ for m in SQLModel._sa_registry.mappers if m.local_table is table}
             for table in SQLModel.metadata.sorted_tables}
    assert {name: mods for name, mods in homes.items() if mods != {"store.schema.tables"}} == {}
    assert {t.name for t in SQLModel.metadata.sorted_tables} == {t.name for t in every_table()} - {"escrow_migrations"}
