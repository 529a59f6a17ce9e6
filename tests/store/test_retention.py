"""``escrow gc``: whole runs deleted with the blobs only they used, each
deletion recorded, and the store still verifying."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from orchestrator.canonical import sha256_hex
from store import Recorder, Store
from store.write import synthetic

DAY = 86_400.0


def build(path: Path) -> dict[str, str]:
    now = time.time()
    with Store.open(f"sqlite:///{path}") as store:
        old, new = Recorder(store, clock=lambda: now - 40 * DAY), Recorder(store)
        runs = {
            "old_pass": synthetic.record_run(old, turns=3, seed=1),
            "old_crashed": synthetic.record_run(old, turns=2, seed=2, finish=False),
            "new": synthetic.record_run(new, turns=3, seed=3),
        }
        runs["old_parent"] = synthetic.record_run(old, turns=1, seed=4)
        child = new.start_run(task="fork", repo="/r", config={}, policy={}, model="m", mode="fork",
                              parent_run_id=runs["old_parent"], forked_at_turn=0)
        new.finish_run(child, "PASS")
        runs["child"] = child
    return runs


def gc(path: Path, *args: str) -> dict:
    result = CliRunner().invoke(app, ["gc", "--older-than", "30d", "--json", "--db", f"sqlite:///{path}", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def table(path: Path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


def verify_ok(path: Path) -> None:
    result = CliRunner().invoke(app, ["verify", "--all", "--db", f"sqlite:///{path}"])
    assert result.exit_code == 0, result.output


def test_gc_deletes_old_runs_and_only_the_blobs_they_alone_used(tmp_path):
    path = tmp_path / "escrow.db"
    runs = build(path)
    blobs_before = dict(table(path, "SELECT sha256, body FROM blobs"))
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        kept_requests = {c.id: c.request_json for c in store.calls(runs["new"])}
    verify_ok(path)
    result = gc(path)
    assert result["runs_deleted"] == 2 and result["runs_kept_as_parents"] == 1
    left = {r for (r,) in table(path, "SELECT id FROM runs")}
    assert left == {runs["new"], runs["old_parent"], runs["child"]}
    assert {r for (r,) in table(path, "SELECT run_id FROM deletions")} == {runs["old_pass"], runs["old_crashed"]}
    for t in ("model_calls", "turns", "events", "candidates", "tool_executions"):
        assert table(path, f"SELECT count(*) FROM {t} WHERE run_id NOT IN (SELECT id FROM runs)") == [(0,)]
    blobs_after = dict(table(path, "SELECT sha256, body FROM blobs"))
    gone = blobs_before.keys() - blobs_after.keys()
    assert gone and result["blobs_deleted"] == len(gone)
    assert result["bytes_freed"] > sum(len(blobs_before[s].encode()) for s in gone)
    system = sha256_hex('{"content":"You fix code.","name":null,"role":"system","tool_call_id":null,"tool_calls":[]}')
    assert system in blobs_after  # shared with the runs that stay
    verify_ok(path)
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        assert {c.id: c.request_json for c in store.calls(runs["new"])} == kept_requests
        assert all(sha256_hex(c.request_json) == c.request_sha256 for r in left for c in store.calls(r))


def test_keep_verdict_keeps_those_runs(tmp_path):
    path = tmp_path / "escrow.db"
    runs = build(path)
    result = gc(path, "--keep-verdict", "PASS")
    assert result["runs_deleted"] == 1
    assert {r for (r,) in table(path, "SELECT run_id FROM deletions")} == {runs["old_crashed"]}
    verify_ok(path)
    assert gc(path, "--keep-verdict", "PASS")["runs_deleted"] == 0  # nothing left to do


def test_a_dry_run_counts_what_gc_would_delete_and_deletes_nothing(tmp_path):
    """Issue 27: gc had no dry run. The dry run is the deletion itself, rolled back."""
    path = tmp_path / "escrow.db"
    build(path)
    before = {t: table(path, f"SELECT count(*) FROM {t}") for t in ("runs", "blobs", "deletions", "model_calls")}
    planned = gc(path, "--dry-run")
    assert planned["dry_run"] is True and planned["runs_deleted"] == 2 and planned["blobs_deleted"] > 0
    assert {t: table(path, f"SELECT count(*) FROM {t}") for t in before} == before
    verify_ok(path)
    done = gc(path)
    assert done["dry_run"] is False and {k: v for k, v in done.items() if k != "dry_run"} == {
        k: v for k, v in planned.items() if k != "dry_run"}


def test_a_bad_span_is_a_clear_error(tmp_path):
    path = tmp_path / "escrow.db"
    build(path)
    result = CliRunner().invoke(app, ["gc", "--older-than", "soon", "--db", f"sqlite:///{path}"])
    assert result.exit_code != 0 and "--older-than" in str(result.exception)


def test_gc_frees_the_kept_workspaces_only_its_deleted_runs_recorded(tmp_path):
    from sandbox.kept import keep

    path = tmp_path / "escrow.db"  # a SQLite store keeps its batch workspaces beside its file
    root = tmp_path / "escrow.db.workspaces"
    starts = {}
    for name in ("old", "new"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f.py").write_text(f"{name} = 1\n")
        starts[name] = keep(tmp_path / name, root).path
    long_ago = time.time() - 40 * DAY
    for kept in starts.values():  # both kept long ago; the new run still records its own
        os.utime(kept, (long_ago, long_ago))
    now = time.time()
    with Store.open(f"sqlite:///{path}") as store:
        for name, recorder in (("old", Recorder(store, clock=lambda: now - 40 * DAY)), ("new", Recorder(store))):
            run_id = recorder.start_run(task="t", repo=str(starts[name]), config={}, policy={}, model="m")
            recorder.finish_run(run_id, "PASS")
    dry = gc(path, "--dry-run")
    assert (dry["runs_deleted"], dry["workspaces_deleted"]) == (1, 1) and dry["workspace_bytes_freed"] == 8
    assert starts["old"].is_dir()
    done = gc(path)
    assert (done["workspaces_deleted"], done["workspace_bytes_freed"]) == (1, 8)
    assert not starts["old"].exists() and starts["new"].is_dir()
    text = CliRunner().invoke(app, ["gc", "--older-than", "30d", "--db", f"sqlite:///{path}"])
    assert text.exit_code == 0 and "deleted 0 kept workspaces, freed 0 bytes" in text.output
