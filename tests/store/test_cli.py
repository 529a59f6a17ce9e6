"""``escrow runs``, ``show``, ``verify`` and ``migrate`` through typer's runner
and as the real command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.errors import ConfigError
from store import SCHEMA_VERSION, Recorder, Store
from store.write import synthetic

ESCROW = str(Path(sys.executable).with_name("escrow"))


@pytest.fixture
def populated(db_path, monkeypatch) -> dict[str, str]:
    with Store.open(f"sqlite:///{db_path}") as store:
        recorder = Recorder(store)
        ids = {
            "passed": synthetic.record_run(recorder, turns=2, seed=1, model="m-a"),
            "running": synthetic.record_run(recorder, turns=1, seed=2, model="m-b", finish=False),
        }
    monkeypatch.setenv("ESCROW_DB_URL", f"sqlite:///{db_path}")
    return ids


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_runs_lists_newest_first_and_filters(populated):
    result = invoke("runs")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].startswith("run ")
    assert populated["running"][:12] in lines[1] and populated["passed"][:12] in lines[2]
    listed = json.loads(invoke("runs", "--json").output)
    assert [r["id"] for r in listed] == [populated["running"], populated["passed"]]
    assert listed[1]["totals"]["turns"] == 2 and listed[1]["verdict"] == "PASS"
    for args, expected in ((["--model", "m-a"], ["passed"]), (["--status", "running"], ["running"]),
                           (["--verdict", "PASS"], ["passed"]), (["--since", "1h"], ["running", "passed"]),
                           (["--since", "2999-01-01"], []), (["--limit", "1"], ["running"])):
        found = [r["id"] for r in json.loads(invoke("runs", "--json", *args).output)]
        assert found == [populated[k] for k in expected], args


def test_runs_refuses_a_status_or_verdict_no_run_can_have(populated):
    """Issue 27: `runs --status bogus` and `--verdict pass` printed "no runs", exit 0."""
    from cli.runs_cmd import IMPORT_MODE, IMPORTED
    from orchestrator.interop.records import IMPORT_MODE as MODE
    from store.write.importer import IMPORTED_VERDICT

    assert IMPORTED == IMPORTED_VERDICT and IMPORT_MODE == MODE
    for args, named in ((["--status", "bogus"], "running, crashed or finished"),
                        (["--verdict", "nope"], "BUDGET_EXHAUSTED")):
        result = invoke("runs", *args)
        assert isinstance(result.exception, ConfigError) and named in str(result.exception), (args, result.output)
    found = [r["id"] for r in json.loads(invoke("runs", "--json", "--verdict", "pass").output)]
    assert found == [populated["passed"]]  # a verdict in any case names the recorded one


def test_show_prints_turn_by_turn_and_json(populated):
    text = invoke("show", populated["passed"][:8]).output
    assert f"run {populated['passed']}" in text and "turn 0 COMPLETED" in text and "turn 1 COMPLETED" in text
    assert "rejected at policy, deny by paths.write" in text and "STAGED -> VALIDATING ->" not in text
    full = invoke("show", populated["passed"][:8], "--full").output
    assert "STAGED -> VALIDATING ->" in full and "COMPLETED finish=tool_calls" in full  # the store's details
    data = json.loads(invoke("show", populated["passed"], "--json").output)
    assert data["run"]["id"] == populated["passed"]
    assert data["turns"][0]["calls"][0]["response"]["status"] == "COMPLETED"


def test_verify_one_all_and_usage_errors(populated):
    result = invoke("verify", populated["running"][:6])
    assert result.exit_code == 0 and result.output.startswith("ok")
    result = invoke("verify", "--all", "--json")
    assert result.exit_code == 0 and [c["ok"] for c in json.loads(result.stdout)] == [True, True]
    for args in ([], [populated["running"], "--all"]):
        assert isinstance(invoke("verify", *args).exception, ConfigError)
    assert isinstance(invoke("runs", "--since", "soon").exception, ConfigError)


def test_migrate_reports_the_version(populated):
    result = invoke("migrate")
    assert result.exit_code == 0 and f"schema version {SCHEMA_VERSION}" in result.output


def test_real_command_shows_and_verifies(populated):
    env = {**os.environ}
    shown = subprocess.run(
        [ESCROW, "show", populated["passed"][:10]], env=env, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0 and "turn 1 COMPLETED" in shown.stdout and not shown.stderr
    verified = subprocess.run([ESCROW, "verify", "--all"], env=env, capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0 and verified.stdout.count("ok ") == 2


@pytest.mark.parametrize("form", ["absolute", "relative", "home", "url"])
def test_db_takes_a_sqlite_file_path_as_well_as_a_url(populated, db_path, form, monkeypatch):
    """``--db store.db`` names the file: before, every store command refused
    it as an unparsable URL (exit 4). A relative path is the working
    directory's, as the shell would read it."""
    monkeypatch.delenv("ESCROW_DB_URL")
    given = {"absolute": str(db_path), "relative": db_path.name, "home": f"~/{db_path.name}",
             "url": f"sqlite:///{db_path}"}[form]
    env = {**os.environ, "HOME": str(db_path.parent), "ESCROW_HOME": str(db_path.parent / "elsewhere")}
    for args in (["runs", "--json"], ["verify", "--all", "--json"], ["migrate"],
                 ["show", populated["passed"][:10], "--json"]):
        done = subprocess.run([ESCROW, *args, "--db", given], env=env, cwd=db_path.parent, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, (args, done.stderr)
        if args[0] == "runs":
            assert {r["id"] for r in json.loads(done.stdout)} == set(populated.values())
    assert not (db_path.parent / "elsewhere").exists()  # nothing opened the default store
    from orchestrator.settings import load_settings

    monkeypatch.chdir(db_path.parent)
    monkeypatch.setenv("HOME", str(db_path.parent))
    assert load_settings(None, db_url=given).db_url == f"sqlite:///{db_path.resolve()}"
