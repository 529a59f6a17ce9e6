"""Who starts the verifier's container early: a single run does by default;
a batch's runs do not (their sandbox starts wait for --start-slots, an early
start would not), unless the setting says so; the setting reads from the
environment and the flags like every other."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.composition.launch.live_run import RunRequest, early_verifier_wanted
from orchestrator.settings import Settings, load_settings

SINGLE = RunRequest(task="t", repo=Path("."), verify="pytest")
IN_BATCH = RunRequest(task="t", repo=Path("."), verify="pytest", batch={"batch_id": "b", "task_id": "t"})


@pytest.mark.parametrize(("setting", "single", "in_batch"), [(None, True, False), (True, True, True),
                                                             (False, False, False)])
def test_the_early_verifier_is_for_single_runs_unless_set(setting, single, in_batch):
    settings = Settings(verify_early=setting)
    assert early_verifier_wanted(settings, SINGLE) is single
    assert early_verifier_wanted(settings, IN_BATCH) is in_batch


def test_the_setting_reads_the_environment_and_a_flag_wins(monkeypatch):
    monkeypatch.setenv("ESCROW_VERIFY_EARLY", "0")
    assert load_settings().verify_early is False
    assert load_settings(verify_early=True).verify_early is True
    monkeypatch.delenv("ESCROW_VERIFY_EARLY")
    assert load_settings().verify_early is None


@pytest.mark.parametrize("command", ["run", "batch"])
def test_run_and_batch_offer_the_flag(command):
    shown = " ".join(CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output.split())
    assert "--verify-early" in shown and "--no-verify-early" in shown
