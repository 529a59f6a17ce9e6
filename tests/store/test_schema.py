"""The schema as a public interface: OTel column names, versions, migrations."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from store import Recorder, SchemaTooOld, Store
from store.schema.migrations import LATEST, MIGRATIONS, V2_INDEXES, V3_INDEXES, V4_COLUMNS, create_latest, store_tables
from store.write import synthetic

OTEL_COLUMNS = {
    "runs": {"gen_ai.request.model"},
    "model_calls": {
        "gen_ai.operation.name", "gen_ai.request.model", "gen_ai.request.max_tokens", "gen_ai.request.temperature",
        "gen_ai.request.top_p", "gen_ai.request.top_k", "gen_ai.request.seed", "gen_ai.request.stop_sequences",
    },
    "model_responses": {
        "gen_ai.response.finish_reasons", "gen_ai.response.model", "gen_ai.usage.input_tokens",
        "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.output_tokens", "error.type",
    },
    "candidates": {"gen_ai.tool.call.id", "gen_ai.tool.name"},
    "tool_executions": {"gen_ai.tool.name", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"},
}


def columns(path, table: str) -> set[str]:
    with closing(sqlite3.connect(path)) as conn:
        return {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')}


def indexes(path) -> set[str]:
    with closing(sqlite3.connect(path)) as conn:
        return {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index' AND name NOT LIKE 'sqlite_%'")
        }


def test_columns_on_disk_carry_opentelemetry_names(store, db_path):
    for table, names in OTEL_COLUMNS.items():
        assert names <= columns(db_path, table), table


def test_a_new_store_is_at_the_latest_version_in_wal_mode(store, db_path):
    assert store.schema_version == LATEST == MIGRATIONS[-1].version
    assert [m.version for m in MIGRATIONS] == list(range(1, LATEST + 1))
    with closing(sqlite3.connect(db_path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert [r[0] for r in conn.execute("SELECT version FROM escrow_migrations ORDER BY version")] == list(
            range(1, LATEST + 1)
        )


def test_the_schema_page_documents_the_latest_version_and_each_migration():
    """docs/SCHEMA.md is the public interface: its stated version and its
    table of migrations keep up with store/schema/migrations.py (it said 9 at 12)."""
    page = (Path(__file__).parents[2] / "docs" / "SCHEMA.md").read_text()
    assert f"documents schema version **{LATEST}**" in page
    section = page.split("## Versions and migrations", 1)[1].split("\n## ", 1)[0]
    assert [int(v) for v in re.findall(r"^\| (\d+) \| ", section, re.M)] == [m.version for m in MIGRATIONS]


def make_v1_store(path) -> None:
    """A store as schema 1 left it: the tables, without the indexes migrations
    2 and 3 add and the columns migration 4 adds."""
    engine = create_engine(f"sqlite:///{path}")
    create_latest(engine)
    with engine.begin() as conn:
        for _, name, _ in V2_INDEXES + V3_INDEXES:
            conn.exec_driver_sql(f'DROP INDEX "{name}"')
        for table, column, _ in V4_COLUMNS:
            conn.exec_driver_sql(f'ALTER TABLE {table} DROP COLUMN "{column}"')
        conn.exec_driver_sql("DELETE FROM escrow_migrations WHERE version > 1")
    engine.dispose()


def test_an_older_store_is_migrated_by_a_writer_and_keeps_its_chains(tmp_path):
    path = tmp_path / "old.db"
    make_v1_store(path)
    assert not {name for _, name, _ in V2_INDEXES + V3_INDEXES} & indexes(path)
    with pytest.raises(SchemaTooOld, match="escrow migrate"):
        Store.open(f"sqlite:///{path}", readonly=True)
    with Store.open(f"sqlite:///{path}") as store:
        run_id = synthetic.record_run(Recorder(store), turns=2)
        assert store.schema_version == LATEST
    assert {name for _, name, _ in V2_INDEXES + V3_INDEXES} <= indexes(path)
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        assert store.verify(run_id).ok


def test_migrated_schema_equals_a_freshly_created_one(tmp_path):
    old, new = tmp_path / "old.db", tmp_path / "new.db"
    make_v1_store(old)
    Store.open(f"sqlite:///{old}").close()
    Store.open(f"sqlite:///{new}").close()
    for table in store_tables():
        assert columns(old, table.name) == columns(new, table.name) == set(table.columns.keys())
    assert indexes(old) == indexes(new)


def test_listing_and_show_queries_use_indexes(recorded, db_path):
    plans = {
        "runs": 'SELECT * FROM runs ORDER BY created_at DESC LIMIT 50',
        "runs by model": 'SELECT * FROM runs WHERE "gen_ai.request.model" = ? ORDER BY created_at DESC LIMIT 50',
        "calls of a run": "SELECT * FROM model_calls WHERE run_id = ? ORDER BY seq",
        "responses of a run": "SELECT run_id, count(*) FROM model_responses WHERE run_id IN (?) GROUP BY run_id",
        "events of a run": "SELECT * FROM events WHERE run_id = ? ORDER BY seq",
    }
    with closing(sqlite3.connect(db_path)) as conn:
        for name, query in plans.items():
            plan = " ".join(str(r[-1]) for r in conn.execute(f"EXPLAIN QUERY PLAN {query}", ("x",) * query.count("?")))
            assert "USING" in plan, (name, plan)  # every table access goes through an index
            assert "TEMP B-TREE" not in plan, (name, plan)


def test_sqlite_connections_are_set_up_for_durable_concurrent_writes(store):
    with store.write() as conn:
        pragmas = {
            p: conn.exec_driver_sql(f"PRAGMA {p}").scalar()
            for p in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
        }
        assert conn.exec_driver_sql("SELECT 1").scalar() == 1
    assert pragmas == {"journal_mode": "wal", "synchronous": 2, "foreign_keys": 1, "busy_timeout": 30000}
    assert inspect(store._reader).get_table_names()  # the reader engine sees the same file
