"""The same models and Recorder against PostgreSQL: a throwaway cluster from
Debian's postgresql package, on a unix socket in a temporary directory.
Under CI=true a missing PostgreSQL fails this test; elsewhere it skips."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from cli.main import app
from store import ChainBroken, Recorder, Store
from store.write import synthetic

IN_CI = os.environ.get("CI", "").lower() == "true"


def unavailable(why: str) -> None:
    if IN_CI:
        pytest.fail(f"PostgreSQL is required in CI but {why} (apt-get install postgresql)")
    pytest.skip(f"PostgreSQL unavailable: {why} (would fail under CI=true)")


def pg_bin() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    bindir = pg_bin()
    if bindir is None:
        unavailable("no /usr/lib/postgresql/*/bin/initdb")
    as_user: list[str] = []
    base = tempfile.mkdtemp(prefix="escrow-pg-", dir="/tmp")
    if os.geteuid() == 0:  # postgres refuses to run as root
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            unavailable("no postgres system user")
        os.chown(base, account.pw_uid, account.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = os.path.join(base, "data"), str(20000 + os.getpid() % 20000)

    def run(*args: str) -> None:
        subprocess.run([*as_user, *args], check=True, capture_output=True, timeout=120)

    try:
        run(f"{bindir}/initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        run(f"{bindir}/pg_ctl", "-D", data, "-w", "-l", os.path.join(base, "log"), "-o",
            f"-k {base} -p {port} -c listen_addresses='' -c fsync=off", "start")
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(base, ignore_errors=True)
        unavailable(f"the cluster did not start: {exc.stderr.decode(errors='replace')[-300:]}")
    admin = create_engine(
        f"postgresql+psycopg://postgres@/postgres?host={base}&port={port}", isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text("CREATE DATABASE escrow"))
    admin.dispose()
    try:
        yield f"postgresql+psycopg://postgres@/escrow?host={base}&port={port}"
    finally:
        subprocess.run(
            [*as_user, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True, timeout=60
        )
        shutil.rmtree(base, ignore_errors=True)


def test_recorder_and_readers_work_on_postgresql(postgres_url):
    with Store.open(postgres_url) as store:
        assert store.dialect == "postgresql"
        recorder = Recorder(store)
        run_id = synthetic.record_run(recorder, turns=3, seed=5)
        running = synthetic.record_run(recorder, turns=1, seed=6, finish=False)
        trajectory = store.trajectory(run_id[:10])
        for record in trajectory.turns:
            for call in record.calls:
                assert call.request().sha256() == call.request_sha256
                assert call.response.envelope().usage.prompt_tokens == call.response.input_tokens
        assert [s.run.id for s in store.runs()] == [running, run_id]
        assert store.runs(verdict="PASS")[0].totals.turns == 3
        assert all(c.ok for c in store.verify_all())
    with Store.open(postgres_url, readonly=True) as store:
        assert store.verify(run_id).ok and store.schema_version >= 2


def test_escrow_commands_and_tamper_detection_on_postgresql(postgres_url):
    with Store.open(postgres_url) as store:
        run_id = synthetic.record_run(Recorder(store), turns=2, seed=7)
    result = CliRunner().invoke(app, ["runs", "--json", "--db", postgres_url])
    assert result.exit_code == 0 and run_id in result.output
    result = CliRunner().invoke(app, ["verify", run_id, "--db", postgres_url])
    assert result.exit_code == 0 and result.output.startswith("ok")
    engine = create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE tool_executions SET \"gen_ai.tool.call.result\" = 'forged' WHERE run_id = :r"), {"r": run_id}
        )
    engine.dispose()
    result = CliRunner().invoke(app, ["verify", run_id, "--db", postgres_url])
    assert isinstance(result.exception, ChainBroken) and "hash mismatch" in result.output


def test_shared_blobs_and_gc_on_postgresql(postgres_url):
    """Content-addressed requests on PostgreSQL: a shared blob changed is
    reported on every run that uses it; gc removes a run and what only it used."""
    import time

    from orchestrator.canonical import sha256_hex
    from store.write.retention import collect

    with Store.open(postgres_url) as store:
        old = Recorder(store, clock=lambda: time.time() - 40 * 86_400)
        ids = [synthetic.record_run(old, turns=2, seed=s) for s in (21, 22)]
        kept = synthetic.record_run(Recorder(store), turns=2, seed=23)
    system = sha256_hex('{"content":"You fix code.","name":null,"role":"system","tool_call_id":null,"tool_calls":[]}')
    engine = create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE blobs SET body = replace(body, 'fix', 'own') WHERE sha256 = :s"), {"s": system})
    with Store.open(postgres_url, readonly=True) as store:
        bad = {c.run_id: c.problem for c in store.verify_all() if not c.ok}
    assert {*ids, kept} <= set(bad) and all(kept in p and ids[0] in p for p in bad.values())
    with engine.begin() as conn:
        conn.execute(text("UPDATE blobs SET body = replace(body, 'own', 'fix') WHERE sha256 = :s"), {"s": system})
    with Store.open(postgres_url) as store, store.write() as conn:
        result = collect(conn, before=time.time() - 30 * 86_400)
    assert result.runs_deleted >= 2 and result.blobs_deleted > 0 and result.bytes_freed > 0
    with Store.open(postgres_url, readonly=True) as store:
        checks = store.verify_all()  # (the run forged by the test above stays broken)
        assert store.verify(kept).ok and not {c.run_id for c in checks} & set(ids)
        assert all(sha256_hex(c.request_json) == c.request_sha256 for c in store.calls(kept))
    engine.dispose()
