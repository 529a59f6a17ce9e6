"""SUSPECT end to end: a real fix beside code that reaches for the machinery
of verification (an ``atexit`` handler in calc.py) passes its verifier and
ends SUSPECT, through a real ``escrow run`` (the fault server scripting the
model, real Docker under runsc and runc, a real SQLite store): shown as such
by run, show and runs, refused by ``--apply`` and applied with
``--accept-suspect``, reproduced by replay, marked apart in every export."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from cli.view.static_bundle import export_bundle
from orchestrator.adapters.fault_server import FaultServer, Reply, ScriptedToolCall
from orchestrator.composition.launch.replay import ReplayRequest, replay_run
from orchestrator.settings import load_settings
from sandbox.errors import ApplyRefused
from store import Store
from tests.conftest import require

pytestmark = [pytest.mark.docker]

ESCROW = Path(sys.executable).parent / "escrow"
BUGGY = "sum(values) / (len(values) + 1)"
FIXED = "sum(values) / len(values)"
DOCSTRING = '"""A tiny calculator with one bug for the agent to fix."""\n'
HANDLER = "import atexit\n\natexit.register(print, 'bye')\n"


def call(name: str, **args: object) -> ScriptedToolCall:
    return ScriptedToolCall(name=name, arguments=json.dumps(args))


def script_fix_with_atexit(fault: FaultServer) -> None:
    fault.script([Reply(tool_calls=(
        call("edit_file", path="calc.py", old=BUGGY, new=FIXED),
        call("edit_file", path="calc.py", old=DOCSTRING, new=DOCSTRING + HANDLER),
        call("submit", summary="fixed"),
    ))])


def escrow(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ESCROW_HOME": str(home)}
    return subprocess.run([str(ESCROW), *args], env=env, capture_output=True, text=True, timeout=300)


def run_args(repo: Path, url: str, runtime: str, *extra: str) -> list[str]:
    return ["run", "Fix mean() in calc.py", "--repo", str(repo), "--verify", "python3 -m pytest -q -p no:cacheprovider",
            "--model-url", url, "--context-window", "8192", "--tokenizer", "cl100k_base", "--runtime", runtime,
            "--max-turns", "2", *extra]


@pytest.mark.parametrize("runtime", ["runsc", "runc"])
def test_a_fix_with_an_atexit_handler_is_suspect_everywhere(tmp_path, repo, fault, sandbox_image, runtime,
                                                            default_runtime):
    require(runtime == "runc" or default_runtime == "runsc", "runsc registered with dockerd (scripts/setup.sh)")
    home = tmp_path / "home"
    db = f"sqlite:///{home / 'escrow.db'}"
    script_fix_with_atexit(fault)
    done = escrow(home, *run_args(repo, fault.base_url, runtime, "--apply", "--json"))

    assert done.returncode == ApplyRefused.exit_code, done.stderr  # 77: --apply refused, nothing written
    shown = json.loads(done.stdout)
    assert shown["verdict"] == "SUSPECT" and shown["applied"] is False
    assert [(r["code"], r["path"], r["line"]) for r in shown["suspect"]] == [("atexit", "calc.py", 2),
                                                                             ("atexit", "calc.py", 4)]
    assert "SUSPECT" in shown["apply_refused"] and "atexit calc.py:2" in shown["apply_refused"]
    assert "--apply refused" in done.stderr and "--accept-suspect" in " ".join(done.stderr.split())
    assert BUGGY in (repo / "calc.py").read_text() and "atexit" not in (repo / "calc.py").read_text()
    run_id = shown["run_id"]
    assert shown["patch_sha256"]  # the verified patch, as for PASS

    runner = CliRunner()
    show = runner.invoke(app, ["show", run_id, "--db", db])
    assert show.exit_code == 0, show.output
    flat = " ".join(show.output.split())
    assert "SUSPECT" in flat and "atexit calc.py:2" in flat
    listed = runner.invoke(app, ["runs", "--verdict", "suspect", "--json", "--db", db])
    assert listed.exit_code == 0, listed.output
    assert [r["id"] for r in json.loads(listed.stdout)] == [run_id]
    assert json.loads(runner.invoke(app, ["runs", "--verdict", "PASS", "--json", "--db", db]).output) == []

    by_verdict = json.loads(runner.invoke(app, ["report", "--by", "verdict", "--json", "--db", db]).stdout)
    assert {g["verdict"]: g["runs"] for g in by_verdict["groups"]} == {"SUSPECT": 1}

    # The verdict event records the reasons and the patch's digest.
    with Store.open(db, readonly=True, create=False) as store:
        (verdict,) = store.events(run_id, "verdict")
        assert verdict.data["patch_sha256"] == shown["patch_sha256"]
        assert [r["code"] for r in verdict.data["suspect"]] == ["atexit", "atexit"]
        export_bundle(store, tmp_path / "bundle", [run_id])
    page = (tmp_path / "bundle" / f"run-{run_id}.html").read_text()
    assert '<span class="badge warn">SUSPECT</span>' in page and "atexit calc.py:2" in page

    # The human box says SUSPECT; its exit code is a finding, not 0.
    script_fix_with_atexit(fault)
    plain = escrow(home, *run_args(repo, fault.base_url, runtime, "--plain"))
    assert plain.returncode == 1, plain.stderr
    said = " ".join(plain.stderr.split())
    assert "SUSPECT" in said and "atexit calc.py:2" in said

    # --accept-suspect: the verified patch is applied as for PASS; the verdict stays SUSPECT.
    script_fix_with_atexit(fault)
    accepted = escrow(home, *run_args(repo, fault.base_url, runtime, "--apply", "--accept-suspect", "--json"))
    assert accepted.returncode == 1, accepted.stderr
    outcome = json.loads(accepted.stdout)
    assert outcome["verdict"] == "SUSPECT" and outcome["applied"] is True and not outcome["apply_refused"]
    assert FIXED in (repo / "calc.py").read_text() and HANDLER in (repo / "calc.py").read_text()

    # Every export marks it apart: no reward, suspect with its reasons.
    settings = load_settings(None, home=home)
    exported = runner.invoke(app, ["export", run_id, "--db", db])
    assert exported.exit_code != 0  # not a verified PASS
    line = json.loads(runner.invoke(app, ["export", run_id, "--include-unverified", "--db", db]).stdout)
    assert (line["verdict"], line["reward"], line["suspect"]) == ("SUSPECT", None, True)
    assert line["suspect_reasons"][0].startswith("atexit calc.py:2")
    atif = json.loads(runner.invoke(app, ["export", run_id, "--format", "atif", "--db", db]).stdout)
    assert atif["extra"]["escrow_run"]["reward"] is None and atif["extra"]["escrow_run"]["suspect"] is True
    otel = runner.invoke(app, ["export", run_id, "--format", "otel", "--db", db]).stdout
    assert '"escrow.run.suspect"' in otel and "escrow.run.reward" not in otel and "atexit calc.py:2" in otel
    tokens = [json.loads(t) for t in runner.invoke(
        app, ["export", run_id, "--tokens", "--include-unverified", "--db", db]).stdout.splitlines()]
    assert tokens and all(t["suspect"] is True and t["reward"] is None for t in tokens)

    # Replay of the recording reproduces SUSPECT.
    report = replay_run(settings, ReplayRequest(run=run_id, mode="replay", record=False))
    assert report.identical and report.verdict == "SUSPECT", report
