"""The schema-4 migration on a store written by schema 3 (tests/store/data,
made by make_schema3.py with the code before it): exact request bytes, the
chains valid before and after, and a conversion killed with SIGKILL at random
points (real subprocesses) that resumes to the same result."""

from __future__ import annotations

import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

from orchestrator.canonical import sha256_hex
from store import Store, blobs, verify
from store.chain import ChainRow
from store.migrations import LATEST
from store.tables import CHAINED_TABLES

FIXTURE = Path(__file__).parent / "data" / "schema3.db"
ROOT = Path(__file__).resolve().parents[2]
MIGRATE = """
import sys
from store import content_migration
content_migration.BATCH_ROWS = 2  # many commit points to be killed between
pending = content_migration._pending
def announced(*args):
    print("batch", flush=True)
    yield from pending(*args)
content_migration._pending = announced
from store import Store
Store.open(f"sqlite:///{sys.argv[1]}").close()
print("done", flush=True)
"""


def raw(path: Path) -> tuple[list[dict], list[ChainRow]]:
    """Run rows and chained rows read with sqlite3, whatever the schema."""
    with closing(sqlite3.connect(path)) as conn:
        conn.row_factory = sqlite3.Row
        runs = [dict(r) for r in conn.execute("SELECT * FROM runs")]
        rows = [ChainRow(table=t, row=dict(r)) for t in CHAINED_TABLES for r in conn.execute(f'SELECT * FROM "{t}"')]
    return runs, rows


def requests(path: Path) -> dict[str, tuple[str, str]]:
    """call id -> (request text, request_sha256), reassembling converted rows."""
    with closing(sqlite3.connect(path)) as conn:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(model_calls)")}
        if "request_refs" not in columns:
            return {i: (t, s) for i, t, s in conn.execute("SELECT id, request_json, request_sha256 FROM model_calls")}
        bodies = dict(conn.execute("SELECT sha256, body FROM blobs"))
        out = {}
        for i, text, sha, body, refs in conn.execute(
            "SELECT id, request_json, request_sha256, request_body, request_refs FROM model_calls"
        ):
            assert (refs is None) == (text != ""), i  # converted whole or not at all
            out[i] = (blobs.assemble(body, refs, bodies) if refs else text, sha)
    return out


def test_the_fixture_is_a_valid_schema_3_store():
    with closing(sqlite3.connect(FIXTURE)) as conn:
        assert max(v for (v,) in conn.execute("SELECT version FROM escrow_migrations")) == 3
    checks = verify.check_records(*raw(FIXTURE))
    assert len(checks) == 7 and all(c.ok for c in checks)
    assert all(sha256_hex(text) == sha for text, sha in requests(FIXTURE).values())


def test_migration_keeps_every_request_byte_and_every_chain(tmp_path):
    path = tmp_path / "escrow.db"
    shutil.copyfile(FIXTURE, path)
    before = requests(path)
    with Store.open(f"sqlite:///{path}") as store:
        assert store.schema_version == LATEST
        checks = store.verify_all()
        assert len(checks) == 7 and all(c.ok for c in checks), [c.problem for c in checks if not c.ok]
        views = {c.id: c.request_json for run in store.runs(limit=100) for c in store.calls(run.run.id)}
    assert requests(path) == before and views == {i: t for i, (t, _) in before.items()}
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM model_calls WHERE request_hashed_as = 'request_json'").fetchone() == (
            len(before),
        )
        stored = conn.execute("SELECT sum(length(body)) FROM blobs").fetchone()[0]
    assert stored < sum(len(t) for t, _ in before.values()) / 2


def test_a_converted_row_whose_blob_changes_is_reported(tmp_path):
    path = tmp_path / "escrow.db"
    shutil.copyfile(FIXTURE, path)
    Store.open(f"sqlite:///{path}").close()
    with closing(sqlite3.connect(path)) as conn, conn:
        sha, body = conn.execute("SELECT sha256, body FROM blobs WHERE body LIKE '%nul %' LIMIT 1").fetchone()
        conn.execute("UPDATE blobs SET body = ? WHERE sha256 = ?", (body.replace("nul", "NUL"), sha))
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        bad = [c for c in store.verify_all() if not c.ok]
    assert len(bad) == 1 and sha in (bad[0].problem or "")


def test_a_migration_killed_at_random_points_resumes_to_the_same_store(tmp_path):
    path = tmp_path / "escrow.db"
    shutil.copyfile(FIXTURE, path)
    before = requests(path)
    rng = random.Random(14)
    partial_states = kills = 0
    for _ in range(60):
        proc = subprocess.Popen([sys.executable, "-c", MIGRATE, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        # Kill after a random number of announced batches, plus up to 20 ms.
        wanted, seen, finished = rng.randrange(1, 12), 0, False
        for line in proc.stdout:
            finished = line.strip() == "done"
            seen += line.strip() == "batch"
            if seen >= wanted:
                time.sleep(rng.random() / 50)
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait()
        if proc.returncode == 0 and finished:
            break
        assert proc.returncode == -signal.SIGKILL
        kills += 1
        now = requests(path)  # every row whole: text, or a full set of references
        assert now == before
        with closing(sqlite3.connect(path)) as conn:
            columns = {r[1] for r in conn.execute("PRAGMA table_info(model_calls)")}
            if "request_refs" in columns:
                converted = conn.execute("SELECT count(*) FROM model_calls WHERE request_refs IS NOT NULL").fetchone()[
                    0
                ]
                partial_states += 0 < converted < len(before)
    else:
        raise AssertionError("the migration never finished")
    assert kills >= 2 and partial_states >= 1, (kills, partial_states)
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        assert store.schema_version == LATEST
        checks = store.verify_all()
    assert len(checks) == 7 and all(c.ok for c in checks), [c.problem for c in checks if not c.ok]
    assert requests(path) == before
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM model_calls WHERE request_refs IS NULL").fetchone() == (0,)
        assert conn.execute("SELECT max(version) FROM escrow_migrations").fetchone() == (LATEST,)


def test_the_migrated_fixture_has_the_schema_of_a_fresh_store(tmp_path):
    old, new = tmp_path / "old.db", tmp_path / "new.db"
    shutil.copyfile(FIXTURE, old)
    Store.open(f"sqlite:///{old}").close()
    Store.open(f"sqlite:///{new}").close()
    for path in (old, new):
        with closing(sqlite3.connect(path)) as conn:
            shape = {t: {(r[1], r[2].upper(), r[3]) for r in conn.execute(f'PRAGMA table_info("{t}")')}
                     for t in ("model_calls", "blobs", "deletions")}
        if path == old:
            migrated = shape
    assert migrated == shape
