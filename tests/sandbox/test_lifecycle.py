"""A run end to end through the real container: tools, verifier, patch,
apply on request, timeouts, orphan removal."""

from __future__ import annotations

import os
import subprocess

import pytest

from orchestrator.toolset import TOOLS, tool_specs
from policies import Effect, decide, default_policy
from sandbox import ExecLimits, ToolBox, apply_patch, remove_orphans
from sandbox.hardening import LABEL_HOST, LABEL_PID, LABEL_PID_START, LABEL_ROLE, LABEL_RUN
from tests.sandbox.conftest import all_at_once

pytestmark = pytest.mark.docker


def run(toolbox: ToolBox, name: str, arguments: str):
    args = TOOLS[name].model_validate_json(arguments)
    assert decide(name, args, toolbox.policy).effect is Effect.ALLOW
    return toolbox.execute(name, args)


def test_fix_verify_patch_and_apply(start_sandbox, demo_repo):
    before = (demo_repo / "calc.py").read_text()
    sandbox = start_sandbox(demo_repo)
    box = ToolBox(sandbox, default_policy(), verifier_command="python3 -m pytest -q -p no:cacheprovider")
    failed = run(box, "submit", "{}")
    assert failed.verifier_passed is False and "1 failed" in failed.observation
    assert run(box, "read_file", '{"path": "calc.py"}').observation == before
    assert run(box, "edit_file", '{"path": "calc.py", "old": "a - b", "new": "a + b"}').ok
    assert run(box, "write_file", '{"path": "notes/new.txt", "content": "hi\\n"}').ok
    assert "notes/" in run(box, "list_files", '{"path": "."}').observation
    passed = run(box, "submit", '{"summary": "fixed add"}')
    assert passed.verifier_passed is True and passed.ok
    patch = sandbox.patch()
    assert set(patch.files) == {"calc.py", "notes/new.txt"}
    assert (demo_repo / "calc.py").read_text() == before, "the user's checkout must not change before apply"
    apply_patch(patch, demo_repo)
    assert "a + b" in (demo_repo / "calc.py").read_text()
    assert (demo_repo / "notes" / "new.txt").read_text() == "hi\n"


def test_exec_reports_exit_code_caps_and_duration(start_sandbox, demo_repo):
    sandbox = start_sandbox(demo_repo)
    outcome = sandbox.bash(
        "printf 'abc'; printf 'err' >&2; exit 7", ExecLimits(timeout_s=5, stdout_cap=256, stderr_cap=256)
    )
    assert (outcome.exit_code, outcome.stdout.text(), outcome.stderr.text()) == (7, "abc", "err")
    assert outcome.stdout.sha256 == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert not outcome.timed_out and outcome.duration_s > 0
    slow = sandbox.bash("sleep 30", ExecLimits(timeout_s=1, stdout_cap=256, stderr_cap=256))
    assert slow.timed_out and slow.exit_code == 124 and slow.duration_s < 6


def test_tool_specs_are_stable_and_strict():
    specs = tool_specs()
    assert [s.name for s in specs] == ["bash", "read_file", "write_file", "edit_file", "list_files", "submit"]
    assert all(s.parameters["additionalProperties"] is False for s in specs)
    assert specs == tool_specs()


def test_orphans_of_dead_owners_are_removed(docker_client, sandbox_image, start_sandbox, demo_repo):
    dead = subprocess.Popen(["true"])
    dead.wait()
    labels = {LABEL_ROLE: "1", LABEL_RUN: "orphan-test", LABEL_PID: str(dead.pid), LABEL_PID_START: "1",
              LABEL_HOST: os.uname().nodename}
    orphan = docker_client.containers.create(sandbox_image, ["sleep", "infinity"], labels=labels, network_mode="none")
    live = start_sandbox(demo_repo)  # creation itself sweeps orphans
    ids = {c.id for c in docker_client.containers.list(all=True, filters={"label": f"{LABEL_ROLE}=1"})}
    assert orphan.id not in ids and live.container.id in ids
    assert live.container.name not in remove_orphans(docker_client)


def test_sweeps_racing_on_one_orphan_all_succeed(docker_client, sandbox_image):
    """Two sandbox starts at once (a batch's workers) each sweep orphans; the
    later remover of one orphan gets dockerd's 409 "removal already in
    progress", which must not fail its start (it did: the run ended
    INFRA_ERROR, "sandbox did not start")."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphans = []
    for n in range(3):
        labels = {LABEL_ROLE: "1", LABEL_RUN: f"orphan-race-{n}", LABEL_PID: str(dead.pid), LABEL_PID_START: "1",
                  LABEL_HOST: os.uname().nodename}
        orphans.append(docker_client.containers.run(sandbox_image, ["sleep", "infinity"], labels=labels,
                                                    network_mode="none", detach=True))
    assert all_at_once(lambda: remove_orphans(docker_client), 6) == []
    left = {c.id for c in docker_client.containers.list(all=True, filters={"label": f"{LABEL_ROLE}=1"})}
    assert not left & {o.id for o in orphans}
