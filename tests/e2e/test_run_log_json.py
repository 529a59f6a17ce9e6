"""Issue 42, group 4: ``escrow run --log-json`` is machine-readable to the
end. Piped, stdout is the patch alone and stderr is JSON lines only, the
verdict among them as an event (it ended with a drawn box and never emitted
the verdict)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from orchestrator.adapters.fault_server import FaultServer
from tests.e2e.test_run_cli import ESCROW, tool

pytestmark = [pytest.mark.docker]


def test_log_json_ends_with_the_verdict_as_an_event(tmp_path, repo, fault: FaultServer, sandbox_image) -> None:
    fault.script([
        tool("edit_file", path="calc.py", old="(len(values) + 1)", new="len(values)"),
        tool("submit", summary="fixed"),
    ])
    env = {**os.environ, "ESCROW_HOME": str(tmp_path / "home")}
    args = [str(ESCROW), "run", "Fix mean() in calc.py", "--repo", str(repo), "--verify", "python3 -m pytest -q",
            "--model-url", fault.base_url, "--context-window", "8192", "--tokenizer", "cl100k_base", "--log-json"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("diff --git a/calc.py b/calc.py"), done.stdout
    events = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]  # every line parses
    verdict = [e for e in events if e["event"] == "verdict"]
    assert len(verdict) == 1 and verdict[0]["verdict"] == "PASS" and verdict[0]["patch_files"] == ["calc.py"]
    assert verdict[0]["run_id"] == next(e["run_id"] for e in events if e["event"] == "turn")
