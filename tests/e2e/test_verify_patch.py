"""``escrow verify-patch RUN``, end to end: runs recorded through the fault
server (real HTTP, Docker, SQLite), then their patches re-verified by the
real CLI in a subprocess. A fixing patch passes again; a forgery is shown
flagged, with what the verifier's copy did to it, and fails; every bad input
is a clear error with its exit code, never a traceback. ``--json`` stdout
parses (tests/reports/test_json_stdout.py points here) and the human report
fits 80 columns."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.adapters.fault_server import Reply, ScriptedToolCall
from orchestrator.composition.launch import RunRequest, run_agent
from orchestrator.exit_codes import ExitCode
from orchestrator.settings import Settings
from policies import FlagReason

pytestmark = [pytest.mark.docker]

ESCROW = Path(sys.executable).parent / "escrow"
TASK = "Fix the bug in mean() in calc.py so that the tests pass."
VERIFY = "python3 -m pytest -q -p no:cacheprovider"
BUGGY, FIXED = "sum(values) / (len(values) + 1)", "sum(values) / len(values)"
PASS_EVERY_REPORT = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)


def call(name: str, **args: object) -> ScriptedToolCall:
    return ScriptedToolCall(name=name, arguments=json.dumps(args))


EDIT = call("edit_file", path="calc.py", old=BUGGY, new=FIXED)
FORGE = call("write_file", path="conftest.py", content=PASS_EVERY_REPORT)
SUBMIT = call("submit", summary="done")


def record(fault, settings: Settings, repo: Path, *calls: ScriptedToolCall) -> str:
    fault.script([Reply(tool_calls=(*calls, SUBMIT))])
    return run_agent(settings.model_copy(update={"max_turns": 1}),
                     RunRequest(task=TASK, repo=repo, verify=VERIFY)).run_id


def escrow(settings: Settings, *argv: str, docker_host: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ESCROW_HOME": str(settings.home), "COLUMNS": "80",
           "ESCROW_SANDBOX_RUNTIME": settings.sandbox_runtime}
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    done = subprocess.run([str(ESCROW), "verify-patch", *argv], env=env, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture
def on(settings: Settings, default_runtime: str) -> Settings:
    return settings.model_copy(update={"sandbox_runtime": default_runtime})


def test_a_passing_patch_passes_again(on, repo, fault):
    run_id = record(fault, on, repo, EDIT)
    done = escrow(on, run_id, "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert (shown["run_id"], shown["verdict"], shown["recorded_verdict"]) == (run_id, "PASS", "PASS")
    assert shown["files"] == ["calc.py"] and shown["flagged"] == []
    assert "verifier PASSED" in shown["observation"]


def test_a_forgery_is_flagged_with_why_and_fails(on, repo, fault):
    run_id = record(fault, on, repo, FORGE)
    done = escrow(on, run_id[:12])
    assert done.returncode == ExitCode.FINDING, done.stderr
    lines = done.stdout.splitlines()
    # Folded at 80 columns; a path longer than that (the repository's, under
    # the test's temporary folder) stands alone on its line, never broken.
    wide = [line for line in lines if len(line) > 80 and " " in line.strip()]
    assert not wide, wide
    assert "verdict today: FAIL" in done.stdout
    (row,) = [line for line in lines if line.startswith("conftest.py")]
    assert "protected" in row
    shown = json.loads(escrow(on, run_id, "--json").stdout)
    assert [(f["path"], f["reason"]) for f in shown["flagged"]] == [("conftest.py", FlagReason.PROTECTED.value)]


def test_flags_only_does_not_run_the_verifier(on, repo, fault):
    run_id = record(fault, on, repo, EDIT, FORGE)
    done = escrow(on, run_id, "--flags-only", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["verdict"] is None and shown["observation"] is None
    assert [f["path"] for f in shown["flagged"]] == ["conftest.py"]
    assert "not verified: --flags-only" in escrow(on, run_id, "--flags-only").stdout


def test_a_fix_beside_a_forgery_passes_with_the_forgery_left_out(on, repo, fault):
    run_id = record(fault, on, repo, EDIT, FORGE)
    shown = json.loads(escrow(on, run_id, "--json").stdout)
    assert shown["verdict"] == "PASS" and [f["path"] for f in shown["flagged"]] == ["conftest.py"]


def test_bad_inputs_are_clear_errors_with_their_exit_codes(on, repo, fault, tmp_path):
    run_id = record(fault, on, repo, EDIT)
    unchanged = record(fault, on, repo, call("read_file", path="calc.py"))

    missing = escrow(on, "feedface")
    assert missing.returncode == ExitCode.RUN_NOT_FOUND and "error:" in missing.stderr

    empty = escrow(on, unchanged)
    assert empty.returncode == ExitCode.NOTHING_TO_REPORT and "no patch" in empty.stderr

    gone = escrow(on, run_id, "--repo", str(tmp_path / "nowhere"))
    assert gone.returncode == ExitCode.USAGE and "--repo" in gone.stderr

    other = tmp_path / "other"
    other.mkdir()
    (other / "calc.py").write_text("print('another repository')\n")
    mismatch = escrow(on, run_id, "--repo", str(other))
    assert mismatch.returncode == ExitCode.USAGE and "does not apply" in mismatch.stderr

    no_docker = escrow(on, run_id, docker_host=f"unix://{tmp_path / 'no-docker.sock'}")
    assert no_docker.returncode == ExitCode.DAEMON_UNAVAILABLE and "error:" in no_docker.stderr

    shutil.rmtree(repo)
    recorded_gone = escrow(on, run_id)
    assert recorded_gone.returncode == ExitCode.USAGE and "--repo" in recorded_gone.stderr
