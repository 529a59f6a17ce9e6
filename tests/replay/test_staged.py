"""A turn's staged candidates are compared with the recorded ones, so a
recorded tool call that today's loop no longer stages (or a recorded envelope
flipped from COMPLETED to TRUNCATED) is reported at the turn where it
happens, not at the next request."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing

import pytest

from orchestrator.adapters.fault_server import FaultServer
from orchestrator.replay import Replayer
from orchestrator.tool_protocols import NativeProtocol
from store import Store
from tests.replay.recording import call, record_memory_run, reply

TWO_CALLS = [
    reply(call("read_file", path="calc.py"), call("bash", command="python3 -m pytest -q")),
    reply(call("list_files", path=".")),
    reply(call("submit")),
]


@pytest.fixture
def recorded(tmp_path, fault_server: FaultServer):
    path = tmp_path / "escrow.db"
    with Store.open(f"sqlite:///{path}") as store:
        run_id = record_memory_run(store, fault_server, TWO_CALLS)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path, run_id


def replay(path, run_id, *, force: bool = False):
    with Store.open(f"sqlite:///{path}", readonly=True) as store:
        replayer = Replayer(store)
        return replayer.offline(replayer.load(run_id, force=force), record=False)


def test_an_untouched_recording_replays_identically(recorded):
    assert replay(*recorded).identical


@pytest.mark.parametrize("kept", [1, 0])
def test_a_recorded_candidate_no_longer_staged_diverges_at_its_own_turn(recorded, monkeypatch, kept):
    original = NativeProtocol.calls
    monkeypatch.setattr(NativeProtocol, "calls", lambda self, payload, turn: original(self, payload, turn)[:kept])
    report = replay(*recorded)
    assert report.divergence is not None
    assert (report.divergence.turn, report.divergence.kind) == (0, "candidates"), report.divergence
    assert report.divergence.field == f"candidates[{kept}]"
    assert ("bash" if kept else "read_file") in report.divergence.diff


def test_a_completed_envelope_flipped_to_truncated_diverges_at_its_own_turn(recorded, tmp_path):
    path, run_id = recorded
    flipped = tmp_path / "flipped.db"
    shutil.copyfile(path, flipped)
    with closing(sqlite3.connect(flipped)) as conn, conn:
        changed = conn.execute(
            "UPDATE model_responses SET envelope_json = replace(envelope_json, '\"status\":\"COMPLETED\"', "
            "'\"status\":\"TRUNCATED\"') WHERE run_id = ? AND turn = 0", (run_id,)).rowcount
    assert changed == 1
    report = replay(flipped, run_id, force=True)
    assert report.divergence is not None
    assert (report.divergence.turn, report.divergence.kind) == (0, "candidates"), report.divergence
