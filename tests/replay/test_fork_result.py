"""Issue 42, group 2: a fork's (and a re-execution's) result is not lost. A
fork that ends PASS with a new fix records its patch before its verdict, as
a live run does, so ``show`` and the viewer show the fix; and the replay's
own text prints the turns it ran live and the patch."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from cli.view.static_bundle import export_bundle
from orchestrator.adapters.fault_server import FaultServer
from store import Store
from tests.replay.recording import BROKEN_MEAN, FIXED_MEAN, call, reply
from tests.replay.test_live import docker_run as docker_run  # noqa: F401 - the fixture
from tests.replay.test_live import replay_cli

pytestmark = pytest.mark.docker


def test_a_forks_fix_is_recorded_printed_and_shown(docker_run, fault_server: FaultServer,  # noqa: F811
                                                   tmp_path: Path) -> None:
    db, _, run_id = docker_run
    fault_server.script(
        [reply(call("edit_file", path="calc.py", old=BROKEN_MEAN, new=FIXED_MEAN)), reply(call("submit"))]
    )
    result = CliRunner().invoke(app, ["replay", run_id, "--fork-at", "4", "--model-url", fault_server.base_url,
                                      "--db", f"sqlite:///{db}"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    # The turns it ran live, and the fix, in the replay's own text.
    assert "turn 4" in out and "edit_file" in out and "turn 5" in out and "submit" in out, out
    assert any(line.startswith("+") and FIXED_MEAN in line for line in out.splitlines()), out
    # A diff's content lines are printed whole; the rest, its index line too, within 80 columns.
    assert all(len(line) <= 80 for line in out.splitlines()
               if not line.startswith(("+", "-", " ", "@@", "diff --git"))), out
    fork_id = next(line.split()[-1] for line in out.splitlines() if "recorded as run" in line)
    shown = CliRunner().invoke(app, ["show", fork_id, "--db", f"sqlite:///{db}"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    assert any(line.startswith("+") and FIXED_MEAN in line for line in shown.stdout.splitlines()), shown.stdout
    with Store.open(f"sqlite:///{db}") as store:
        events = [e.kind for e in store.trajectory(fork_id).run_events]
        assert "patch" in events and events.index("patch") < events.index("verdict"), events
        export_bundle(store, tmp_path / "bundle", [fork_id])
    page = (tmp_path / "bundle" / f"run-{fork_id}.html").read_text(encoding="utf-8")
    assert "No patch was recorded" not in page and "calc.py" in page[page.index('id="patch"'):]


def test_a_reexecution_records_the_workspace_it_left(docker_run) -> None:  # noqa: F811
    db, _, run_id = docker_run
    result = replay_cli(db, run_id, "--reexecute")
    assert result.exit_code == 0, result.output
    again = next(line.split()[-1] for line in result.stdout.splitlines() if "recorded as run" in line)
    with Store.open(f"sqlite:///{db}") as store:
        assert "patch" in [e.kind for e in store.trajectory(again).run_events]
