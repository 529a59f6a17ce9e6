"""Host memory at the exit is bounded by the caps, not by the workspace: the
verifier's copy is streamed a blob at a time. A run in a child interpreter
(real fault server, Docker, SQLite) reports its own peak RSS."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.adapters.fault_server import Reply, ScriptedToolCall

pytestmark = [pytest.mark.docker]
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_POLICY = ROOT / "policies" / "default.toml"
CHILD = """
import json, resource, sys
from pathlib import Path
from orchestrator.composition.launch import RunRequest, run_agent
from orchestrator.settings import Settings
args = json.loads(sys.argv[1])
settings = Settings(home=Path(args["home"]), model_url=args["url"], sandbox_image=args["image"],
                    context_window=8192, tokenizer="cl100k_base", max_output_tokens=512, deadline_s=60.0,
                    policy=Path(args["policy"]))
outcome = run_agent(settings, RunRequest(task="t", repo=Path(args["repo"]), verify="test -s l15 && stat -c %s big"))
print(json.dumps({"verdict": outcome.result.verdict.value, "detail": outcome.result.detail,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
MIB = 30
# One 30 MiB file and 15 hard links to it: the export carries its content once
# and the patch is small (zeros deflate), but the verifier's copy has 16 files.
PLANT = f"head -c {MIB * 2**20} /dev/zero > big && for i in $(seq 15); do ln big l$i; done"


def peak_of_run(fault, repo: Path, image: str, home: Path, command: str) -> dict:
    fault.script([Reply(tool_calls=(ScriptedToolCall(name="bash", arguments=json.dumps({"command": command})),
                                    ScriptedToolCall(name="submit", arguments="{}")))])
    # The planted files are kinds the repo lacks: the policy accepts them, so
    # that the verifier's copy really holds the 16 links (the allow-list
    # would leave them out).
    home.mkdir(parents=True, exist_ok=True)
    policy = home / "policy.toml"
    policy.write_text(DEFAULT_POLICY.read_text().replace("hidden = []\n", 'hidden = []\naccept = ["big", "l*"]\n'))
    args = {"home": str(home), "url": fault.base_url, "image": image, "repo": str(repo), "policy": str(policy)}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_file_hard_linked_many_times_costs_the_host_its_size_once(fault, repo, sandbox_image, tmp_path):
    usual = peak_of_run(fault, repo, sandbox_image, tmp_path / "a", "head -c 1000 /dev/zero > big && ln -s big l15")
    linked = peak_of_run(fault, repo, sandbox_image, tmp_path / "b", PLANT)
    print(f"peak RSS: usual run {usual['peak_mib']:.0f} MiB, 16 hard links {linked['peak_mib']:.0f} MiB")
    assert usual["verdict"] == linked["verdict"] == "PASS", (usual, linked)  # the verifier saw all 16 files
    # Built in memory, the copy alone was 16 x 30 MiB (670 MiB peak before it
    # was streamed); now the file is held a few times at most, one at a time.
    assert linked["peak_mib"] < usual["peak_mib"] + 3 * MIB, (usual, linked)
