"""``escrow run`` on the example against the real llama.cpp server (Gemma 3
270M on CPU). The model is too weak to fix the bug; this proves that a real
model's output, whatever it is, ends in a clear verdict with every turn
recorded and nothing crashing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from orchestrator.agent import Verdict
from store import Store

pytestmark = [pytest.mark.llama, pytest.mark.docker, pytest.mark.slow]


def test_real_model_run_ends_in_a_recorded_verdict(tmp_path, repo, llama_url, sandbox_image):
    home = tmp_path / "home"
    args = [
        str(os.path.join(os.path.dirname(sys.executable), "escrow")), "run", "Fix the bug in mean() in calc.py.",
        "--repo", str(repo), "--verify", "python3 -m pytest -q", "--model-url", llama_url + "/v1",
        "--max-turns", "2", "--tool-protocol", "text", "--system-role", "user", "--context-window", "8192",
        "--no-stream", "--max-tokens", "128", "--json",
    ]
    proc = subprocess.run(args, env={**os.environ, "ESCROW_HOME": str(home)}, capture_output=True, text=True,
                          timeout=540)

    assert "Traceback" not in proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["verdict"] in {v.value for v in Verdict}
    assert proc.returncode == (0 if shown["verdict"] == "PASS" else 1), proc.stderr
    assert 1 <= shown["turns"] <= 2
    with Store.open(f"sqlite:///{home / 'escrow.db'}", readonly=True, create=False) as store:
        traj = store.trajectory(shown["run_id"])
        assert traj.run.status == "finished" and traj.run.verdict == shown["verdict"]
        taken = [t for t in traj.turns if t.calls]
        assert len(taken) == shown["turns"]
        for turn in taken:
            assert turn.committed is not None
            (call,) = turn.calls
            assert call.response is not None
            envelope = call.response.envelope()
            assert envelope.request_sha256 == call.request_sha256
            assert call.request().stream is False and call.request().tools == ()
            assert envelope.status.value in {"COMPLETED", "TRUNCATED"}, envelope.error
        assert store.verify(traj.run.id).ok
