"""Migration 8 backfills per-run totals for the finished runs of an existing
store, a batch of runs per transaction, resumably after SIGKILL; the chains
are untouched and the backfilled totals are the ones the writer writes."""

from __future__ import annotations

import signal
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from store import Recorder, Store
from store.schema.migrations import LATEST
from store.write import synthetic
from tests.store.killed_upgrade import killed_upgrade

TOTALS = "SELECT run_id, own, model, engine, calls, prompt_tokens, cached_tokens, output_tokens, direct_s, http_s, " \
         "wait_s, decode_s, retries, tool_s FROM run_totals ORDER BY run_id, own, model, engine"
TTFTS = "SELECT run_id, own, model, engine, bucket_ms, calls FROM run_ttfts " \
        "ORDER BY run_id, own, model, engine, bucket_ms"


def recorded(path: Path) -> list[str]:
    """Six finished runs of varied models and one still running."""
    with Store.open(f"sqlite:///{path}") as store:
        recorder = Recorder(store)
        ids = [synthetic.record_run(recorder, turns=2 + i % 3, seed=i, model=synthetic.MODELS[i % 3])
               for i in range(6)]
        synthetic.record_run(recorder, turns=2, seed=9, finish=False)
    return ids


def as_schema_7(path: Path) -> list[tuple[object, ...]]:
    """What a schema-7 store holds: no totals tables, no stamps 8 and 9. Returns the totals it had."""
    with closing(sqlite3.connect(path)) as conn:
        before = conn.execute(TOTALS).fetchall() + conn.execute(TTFTS).fetchall()
        conn.execute("DROP TABLE run_totals")
        conn.execute("DROP TABLE run_ttfts")
        conn.execute("DROP TABLE ttft_days")
        conn.execute("DELETE FROM escrow_migrations WHERE version >= 8")
        conn.commit()
    return before


def heads(path: Path) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT id, chain_seq, chain_head FROM runs ORDER BY id").fetchall()




def test_a_new_store_writes_totals_for_finished_runs_only(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    ids = recorded(path)
    with closing(sqlite3.connect(path)) as conn:
        assert {r[0] for r in conn.execute("SELECT DISTINCT run_id FROM run_totals")} == set(ids)


@pytest.mark.parametrize("kill_at", [1, 2, 3, 5, 7])
def test_the_backfill_resumes_after_sigkill(tmp_path: Path, kill_at: int) -> None:
    """Killed at a commit (the process dies just before it: the first creates
    the table, each later one writes one run's totals); the next write-open
    completes it."""
    path = tmp_path / "e.db"
    ids = recorded(path)
    chains = heads(path)
    written = as_schema_7(path)
    url = f"sqlite:///{path}"
    done = killed_upgrade(url, kill_at, 7, ("store.schema.migrations", "BACKFILL_RUNS", 1))
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT max(version) FROM escrow_migrations").fetchone()[0] == 7
        table = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'run_totals'").fetchone()
        partial = {r[0] for r in conn.execute("SELECT DISTINCT run_id FROM run_totals")} if table else set()
    assert (table is not None) == (kill_at > 1)
    assert len(partial) == max(0, kill_at - 2) < len(ids), "killed before the end"
    with Store.open(url) as store:  # a write-open resumes the upgrade
        assert store.schema_version == LATEST
        assert all(c.ok for c in store.verify_all()) and len(store.verify_all()) == len(ids) + 1
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute(TOTALS).fetchall() + conn.execute(TTFTS).fetchall() == written
    assert heads(path) == chains


DAYS = "SELECT day, replay, own, model, engine, bucket_ms, calls FROM ttft_days " \
       "ORDER BY day, replay, own, model, engine, bucket_ms"


@pytest.mark.parametrize("kill_at", [0, 1])
def test_migration_9_builds_the_rollup_the_writer_keeps(tmp_path: Path, kill_at: int) -> None:
    """From schema 8 (killed first before its one commit, or not): the rollup
    built from the runs' buckets is the one written run by run, and verify passes."""
    path = tmp_path / "e.db"
    ids = recorded(path)
    with closing(sqlite3.connect(path)) as conn:
        written = conn.execute(DAYS).fetchall()
        conn.execute("DROP TABLE ttft_days")
        conn.execute("DELETE FROM escrow_migrations WHERE version >= 9")
        conn.commit()
    url = f"sqlite:///{path}"
    if kill_at:
        killed_from(path, kill_at, 8)
        with closing(sqlite3.connect(path)) as conn:
            assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'ttft_days'").fetchone() is None
    with Store.open(url) as store:
        assert store.schema_version == LATEST
        assert all(c.ok for c in store.verify_all()) and len(store.verify_all()) == len(ids) + 1
    with closing(sqlite3.connect(path)) as conn:
        assert written and conn.execute(DAYS).fetchall() == written


def killed_from(path: Path, kill_at: int, version: int) -> None:
    """An upgrade from ``version``, one run per transaction, killed at its
    ``kill_at``th commit: the store is still at ``version``."""
    done = killed_upgrade(f"sqlite:///{path}", kill_at, version, ("store.schema.migrations", "BACKFILL_RUNS", 1))
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT max(version) FROM escrow_migrations").fetchone()[0] == version


def upgraded_from(path: Path, version: int, kill_at: int) -> None:
    """The store at ``version`` upgraded by a write-open, after an upgrade
    killed at its ``kill_at``th commit (0: none); every run then verifies."""
    if kill_at:
        killed_from(path, kill_at, version)
    with Store.open(f"sqlite:///{path}") as store:  # a write-open resumes the upgrade
        assert store.schema_version == LATEST
        assert all(c.ok for c in store.verify_all())


def as_schema(path: Path, version: int, column: str) -> None:
    """What a store at ``version`` holds: totals without ``column`` (added by
    the next migration), no stamp above ``version``."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"ALTER TABLE run_totals DROP COLUMN {column}")
        conn.execute("DELETE FROM escrow_migrations WHERE version > ?", (version,))
        conn.commit()


@pytest.mark.parametrize("kill_at", [0, 1, 2, 4])
def test_migration_10_recomputes_the_totals_with_their_digests(tmp_path: Path, kill_at: int) -> None:
    """From schema 9 (killed at its Nth commit, or not): every run's totals
    are written again from its rows, digests included, so a row altered
    before the upgrade is not vouched for; the chains are untouched."""
    path = tmp_path / "e.db"
    ids = recorded(path)
    with closing(sqlite3.connect(path)) as conn:
        written = conn.execute(TOTALS).fetchall()
    as_schema(path, 9, "digest")
    chains = heads(path)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE run_totals SET prompt_tokens = prompt_tokens + 1000 WHERE run_id = ?", (ids[0],))
        conn.commit()
    upgraded_from(path, 9, kill_at)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute(TOTALS).fetchall() == written  # the altered row recomputed from the rows
        assert conn.execute("SELECT count(*) FROM run_totals WHERE digest IS NULL").fetchone()[0] == 0
    assert heads(path) == chains


@pytest.mark.parametrize("kill_at", [0, 1, 3])
def test_migration_11_recomputes_the_totals_with_their_ttft_checks(tmp_path: Path, kill_at: int) -> None:
    """From schema 10 (killed at its Nth commit, or not): every run's totals
    are written again with their TTFT checks under their digests, the same
    rows the writer writes; the chains are untouched and reports pass."""
    path = tmp_path / "e.db"
    recorded(path)
    with closing(sqlite3.connect(path)) as conn:
        written = conn.execute(TOTALS).fetchall() + conn.execute(TTFTS).fetchall()
        checks = conn.execute("SELECT run_id, own, model, engine, ttft_check, digest FROM run_totals "
                              "ORDER BY run_id, own, model, engine").fetchall()
    assert any(row[4] for row in checks), "no run had a TTFT to check"
    as_schema(path, 10, "ttft_check")
    chains = heads(path)
    upgraded_from(path, 10, kill_at)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute(TOTALS).fetchall() + conn.execute(TTFTS).fetchall() == written
        assert conn.execute("SELECT run_id, own, model, engine, ttft_check, digest FROM run_totals "
                            "ORDER BY run_id, own, model, engine").fetchall() == checks
    assert heads(path) == chains


@pytest.mark.parametrize("kill_at", [0, 1, 3])
def test_migration_12_recomputes_the_totals_with_their_cached_counts(tmp_path: Path, kill_at: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """From schema 11 (killed at its Nth commit, or not), with runs whose
    server sent no cached count: every run's totals are written again with
    how many calls reported one, under their digests, the rows the writer
    writes; the chains are untouched, and ``report --by model`` reads them
    (no damaged-store exit) with the cached figure absent where no call
    reported it and the reported ones' sum where some did."""
    import json

    from typer.testing import CliRunner

    from cli.main import app
    from tests.reports.test_absent_figures import NO_CACHE_COUNT, cached, record_calls

    monkeypatch.setenv("ESCROW_HOME", str(tmp_path))
    path = tmp_path / "e.db"
    url = f"sqlite:///{path}"
    with Store.open(url) as store:
        record_calls(store, "m", (NO_CACHE_COUNT, NO_CACHE_COUNT))
        record_calls(store, "k", (cached(1000, 600),))
        record_calls(store, "k", (NO_CACHE_COUNT, cached(500, 100)))
    counted = ("SELECT run_id, own, model, engine, cached_reported, digest FROM run_totals "
               "ORDER BY run_id, own, model, engine")
    with closing(sqlite3.connect(path)) as conn:
        written = conn.execute(TOTALS).fetchall() + conn.execute(TTFTS).fetchall()
        digests = conn.execute(counted).fetchall()
    assert sorted(row[4] for row in digests if row[2] is not None) == [0, 1, 1]
    as_schema(path, 11, "cached_reported")
    chains = heads(path)
    upgraded_from(path, 11, kill_at)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute(TOTALS).fetchall() + conn.execute(TTFTS).fetchall() == written
        assert conn.execute(counted).fetchall() == digests
    assert heads(path) == chains
    got = CliRunner().invoke(app, ["report", "--by", "model", "--json", "--db", url])
    assert got.exit_code == 0, got.output
    groups = {g["model"]: g for g in json.loads(got.stdout)["groups"]}
    assert (groups["m"]["cached_tokens"], groups["m"]["cache_hit_ratio"]) == (None, None)
    assert groups["k"]["cached_tokens"] == 700
