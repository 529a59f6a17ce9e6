"""PostgreSQL stopped in the middle of a local-pool batch: ``escrow batch``
ends with one clear line naming the store and the resume command (exit code
3, a store error; no traceback), and once PostgreSQL is back ``escrow batch
--resume BATCH`` finishes the batch with nothing lost and nothing counted
twice. Real dockerd and sandboxes, the keyed fault server playing each task's
known fix (paced, so the stop lands while runs are in flight), and a
throwaway PostgreSQL cluster stopped with ``pg_ctl -m fast`` and started again."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from urllib.parse import parse_qs, urlparse

import pytest

from orchestrator.composition.batch.tasks import load_task_file
from store import Store
from store.write import batches as bstore
from tests.batch.conftest import EXAMPLES
from tests.batch.test_batch_cli import escrow, wait_for
from tests.processes import run_escrow
from tests.store.test_postgres import pg_bin, postgres_url  # noqa: F401  (fixture)

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def pg_ctl(url: str, action: str) -> None:
    query = parse_qs(urlparse(url).query)
    base, port = query["host"][0], query["port"][0]
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    extra = ["-m", "fast"] if action == "stop" else [
        "-l", os.path.join(base, "log"), "-o", f"-k {base} -p {port} -c listen_addresses='' -c fsync=off"]
    subprocess.run([*as_user, f"{pg_bin()}/pg_ctl", "-D", os.path.join(base, "data"), "-w", *extra, action],
                   check=True, capture_output=True, timeout=120)


def attempts(url: str) -> list[bstore.AttemptView]:
    try:
        with Store.open(url, readonly=True, create=False) as store:
            views = [bstore.load_batch(store, b) for b in bstore_batch_ids(store)]
    except Exception:  # not created yet, or the server is down
        return []
    return [a for v in views if v for a in v.attempts]


def bstore_batch_ids(store: Store) -> list[str]:
    from sqlalchemy import select

    with store.read() as conn:
        return list(conn.execute(select(bstore.B.c.id)).scalars())


def test_postgresql_stopped_mid_batch_then_resume(tmp_path, postgres_url, fault_server, fix_scripts,  # noqa: F811
                                                  sandbox_image):
    tasks = [t.id for t in load_task_file(EXAMPLES / "tasks.jsonl").tasks]
    for task_id in tasks:
        # restart: a task whose run the stop cut off replays its whole fix on --resume
        # (else it took up its script where the dead run left it, and could run out: 12 of 13 passed).
        fault_server.script_for(task_id, [s.model_copy(update={"tokens_per_s": 40.0}) for s in fix_scripts[task_id]],
                                restart=True)
    home = tmp_path / "home"
    common = ["--db", postgres_url, "--workers", "2", "--lease", "3", "--context-window", "8192",
              "--tokenizer", "cl100k_base", "--max-turns", "6"]
    url = f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1"
    driver = escrow(home, "batch", str(EXAMPLES / "tasks.jsonl"), "--model-url", url, *common)
    try:
        wait_for(lambda: sum(a.outcome == bstore.MODEL for a in attempts(postgres_url)) >= 2, "two finished tasks",
                 proc=driver)
        wait_for(lambda: any(a.outcome == bstore.STARTED and a.run_id for a in attempts(postgres_url)),
                 "a run in flight", proc=driver)
        pg_ctl(postgres_url, "stop")
        out, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
    pg_ctl(postgres_url, "start")
    assert driver.returncode == 3, (driver.returncode, err[-3000:])
    assert "Traceback" not in err and "Traceback" not in out, err[-3000:]
    # The error, folded to the terminal's width, is the last thing said: read as one line.
    last = " ".join(("error:" + err.rsplit("error:", 1)[-1]).split())
    assert "store" in last and "escrow batch --resume" in last, err[-2000:]
    batch_id = last.split("escrow batch --resume ")[1].split()[0].strip("`'\".")
    before = attempts(postgres_url)
    done_before = {a.task_id: a.run_id for a in before if a.outcome == bstore.MODEL}
    assert 2 <= len(done_before) < len(tasks)

    resumed = escrow(home, "batch", "--resume", batch_id, "--model-url", url, *common, "--json")
    out, err = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, err[-3000:]
    report = json.loads(out)
    after = attempts(postgres_url)
    models = Counter(a.task_id for a in after if a.outcome == bstore.MODEL)
    assert models == Counter({t: 1 for t in tasks}), "a task lost or counted twice"
    # The tasks done before the stop kept their runs; none was run again.
    assert {a.task_id: a.run_id for a in after if a.outcome == bstore.MODEL and a.task_id in done_before} == done_before
    assert [a for a in after if a.started_at > 0 and a.task_id in done_before and a.outcome != bstore.MODEL] == []
    assert report["passed"] == report["done"] == len(tasks)
    verified = run_escrow(home, "verify", "--all", "--db", postgres_url)
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
