"""The schema-4 migration on a store written by schema 3 (tests/store/data,
made by make_schema3.py with the code before it): exact request bytes, the
chains valid before and after, and a conversion killed with SIGKILL at chosen
points (real subprocesses that wait at each point) that resumes to the same
result."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from contextlib import closing
from pathlib import Path

from orchestrator.canonical import sha256_hex
from store import Store
from store.chain import ChainRow
from store.check import verify
from store.schema.migrations import LATEST
from store.schema.tables import CHAINED_TABLES
from store.write import blobs

FIXTURE = Path(__file__).parent / "data" / "schema3.db"
ROOT = Path(__file__).resolve().parents[2]
# The child converts in batches of 2 rows and stops at three kinds of point,
# naming each on stdout and waiting for "go" on stdin before it goes on:
#   batch   a batch's rows are read; every batch before it is committed
#   middle  the batch's first row is updated, its second not yet
#   commit  every row of the batch is updated, the commit not yet issued
# The parent kills it at the point it chose, so where the kill lands does not
# depend on how fast the machine is.
MIGRATE = """
import sys
from sqlalchemy import event
from sqlalchemy.engine import Engine
from store.schema import migrations
migrations.CONTENT_BATCH_ROWS = 2
def pause(point):
    print(point, flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit(3)
state = {"in_batch": False, "rows": 0}
pending, converted = migrations._unconverted_requests, migrations._converted_request
def announced_pending(*args):
    rows = list(pending(*args))
    if rows:
        state["in_batch"], state["rows"] = True, 0
        pause("batch")
    yield from rows
def announced_converted(row, previous):
    state["rows"] += 1
    if state["rows"] == 2:
        pause("middle")
    return converted(row, previous)
def before_commit(conn):
    if state["in_batch"]:
        state["in_batch"] = False
        pause("commit")
migrations._unconverted_requests = announced_pending
migrations._converted_request = announced_converted
event.listen(Engine, "commit", before_commit)
from store import Store
Store.open(f"sqlite:///{sys.argv[1]}").close()
print("done", flush=True)
"""
BATCH = 2
# (point, batch): where each child is killed, counted within that child. Every
# kind of point at the first batch, then later batches, so the store is seen
# untouched, partly converted, and nearly converted before the last child.
KILL_POINTS = (
    ("batch", 1), ("middle", 1), ("commit", 1),
    ("batch", 2), ("middle", 3), ("commit", 2), ("batch", 4), ("commit", 3), ("middle", 2),
)


def raw(path: Path) -> tuple[list[dict], list[ChainRow]]:
    """Run rows and chained rows read with sqlite3, whatever the schema."""
    with closing(sqlite3.connect(path)) as conn:
        conn.row_factory = sqlite3.Row
        runs = [dict(r) for r in conn.execute("SELECT * FROM runs")]
        present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        rows = [ChainRow(table=t, row=dict(r)) for t in CHAINED_TABLES if t in present
                for r in conn.execute(f'SELECT * FROM "{t}"')]
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


def converted_count(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        columns = {r[1] for r in conn.execute("PRAGMA table_info(model_calls)")}
        if "request_refs" not in columns:
            return 0
        return conn.execute("SELECT count(*) FROM model_calls WHERE request_refs IS NOT NULL").fetchone()[0]


def migrate_until(path: Path, stop: tuple[str, int] | None) -> tuple[subprocess.Popen, int]:
    """Run the child, letting it past every point until ``stop``, where it is
    SIGKILLed (None: to the end). Returns it and the batches it began."""
    proc = subprocess.Popen([sys.executable, "-c", MIGRATE, str(path)], cwd=ROOT, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    seen: Counter[str] = Counter()
    for line in proc.stdout:
        point = line.strip()
        if point == "done":
            break
        seen[point] += 1
        if stop is not None and (point, seen["batch"]) == stop:
            proc.send_signal(signal.SIGKILL)  # it is waiting at the point: nothing after it has run
            break
        proc.stdin.write("go\n")
        proc.stdin.flush()
    proc.wait()
    proc.stdin.close()
    proc.stdout.close()
    return proc, seen["batch"]


def test_a_migration_killed_at_chosen_points_resumes_to_the_same_store(tmp_path):
    path = tmp_path / "escrow.db"
    shutil.copyfile(FIXTURE, path)
    before = requests(path)
    partial_states = 0
    for stop in KILL_POINTS:
        converted = converted_count(path)
        proc, batches = migrate_until(path, stop)
        assert proc.returncode == -signal.SIGKILL, (stop, proc.returncode)
        assert batches == stop[1], stop
        assert requests(path) == before, stop  # every row whole: text, or a full set of references
        # Only this child's committed batches count: the one it was killed in is lost whole.
        assert converted_count(path) == converted + BATCH * (batches - 1), stop
        partial_states += 0 < converted_count(path) < len(before)
    assert partial_states >= len(KILL_POINTS) - 3, partial_states
    proc, _ = migrate_until(path, None)
    assert proc.returncode == 0
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
