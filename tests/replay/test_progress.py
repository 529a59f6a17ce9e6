"""Issue 42, group 14: a long replay and ``view --export`` showed nothing
until they ended. Both report each step (a turn replayed, a page written)
to a progress line on stderr, which shows once the work passes two seconds
(a clock is injected here: no test waits on time)."""

from __future__ import annotations

import io

import pytest
from typer.testing import CliRunner

from cli.display import progress as progress_module
from cli.display.progress import StepProgress
from cli.main import app
from cli.view.static_bundle import export_bundle
from orchestrator.adapters.fault_server import FaultServer
from orchestrator.replay import Replayer
from store import Store
from tests.replay.recording import fixing_steps, record_memory_run


@pytest.fixture
def recorded(tmp_path, fault_server: FaultServer) -> tuple[str, str]:
    db = f"sqlite:///{tmp_path / 'escrow.db'}"
    with Store.open(db) as store:
        return db, record_memory_run(store, fault_server, fixing_steps(extra_reads=3))


def test_a_replay_reports_each_turn(recorded):
    db, run_id = recorded
    steps: list[tuple[int, int]] = []
    with Store.open(db) as store:
        replayer = Replayer(store, progress=lambda done, total: steps.append((done, total)))
        report = replayer.offline(replayer.load(run_id), record=False)
    n = len(report.turns)
    assert report.identical and n > 3 and steps == [(turn, n) for turn in range(1, n + 1)]


def test_view_export_reports_each_page(recorded, tmp_path):
    db, run_id = recorded
    steps: list[tuple[int, int, str]] = []
    with Store.open(db) as store:
        written = export_bundle(store, tmp_path / "bundle", [run_id], progress=lambda *step: steps.append(step))
    assert [(done, total) for done, total, _ in steps] == [(k, len(written)) for k in range(1, len(written) + 1)]
    assert [name for _, _, name in steps] == [path.name for path in written]


def test_the_commands_print_it_on_stderr_past_the_threshold(recorded, tmp_path, monkeypatch):
    db, run_id = recorded
    monkeypatch.setattr(progress_module, "AFTER_S", 0.0)  # as if the work took long
    replayed = CliRunner().invoke(app, ["replay", run_id, "--no-record", "--db", db], env={"COLUMNS": "80"})
    assert replayed.exit_code == 0, replayed.output
    assert "replayed turns: " in replayed.stderr and "replayed turns" not in replayed.stdout
    exported = CliRunner().invoke(app, ["view", "--export", str(tmp_path / "b"), run_id, "--db", db])
    assert exported.exit_code == 0, exported.output
    assert "pages written: " in exported.stderr


def test_short_work_shows_nothing_and_a_pipe_gets_a_line_a_tenth():
    now = [0.0]
    out = io.StringIO()
    shown = StepProgress("steps", stream=out, after_s=2.0, clock=lambda: now[0])
    shown.step(1, 100)
    assert out.getvalue() == ""  # within the threshold
    now[0] = 2.5
    for done in range(2, 101):
        shown.step(done, 100, f"page{done}.html")
    lines = out.getvalue().splitlines()
    assert lines[0] == "steps: 2/100 page2.html" and lines[-1] == "steps: 100/100 page100.html"
    assert len(lines) == 11  # the first, then one at each tenth: not one a step
