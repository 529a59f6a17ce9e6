"""A hostile scripted model against the run's guards, end to end through
``run_agent`` (real fault server, real sandbox, real store): limits hold
inside one answer, and every run ends with a recorded verdict - an
infrastructure failure is INFRA_ERROR with its error, never a run left
``running``."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from orchestrator.adapters.fault_server import Reply, ScriptedToolCall
from orchestrator.agent import Verdict
from orchestrator.composition.launch import RunOutcome, RunRequest, run_agent
from orchestrator.settings import Settings
from policies import default_policy
from sandbox.hardening import LABEL_PID
from store import Trajectory

pytestmark = [pytest.mark.docker]

TASK = "Fix the bug in mean() in calc.py so that the tests pass."


def policy_file(tmp_path: Path, **limits: object) -> Path:
    """The default policy with some [limits] (or [resources]) values replaced."""
    text = (Path(__file__).resolve().parents[2] / "policies" / "default.toml").read_text()
    for key, value in limits.items():
        lines = [line for line in text.splitlines() if line.split("=")[0].strip() == key]
        if lines:
            text = text.replace(lines[0], f"{key} = {value}")
        else:
            text = text.replace("[limits]\n", f"[limits]\n{key} = {value}\n")
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def answer(*calls: tuple[str, dict]) -> Reply:
    return Reply(tool_calls=tuple(ScriptedToolCall(name=n, arguments=json.dumps(a)) for n, a in calls))


def run(settings: Settings, repo: Path, policy: Path | None = None, **kw: object) -> RunOutcome:
    if policy is not None:
        settings = settings.model_copy(update={"policy": policy})
    return run_agent(settings, RunRequest(task=TASK, repo=repo, verify="python3 -m pytest -q"), **kw)


def finished(open_store, outcome: RunOutcome) -> Trajectory:
    store = open_store()
    traj = store.trajectory(outcome.run_id)
    assert traj.run.status == "finished" and traj.run.verdict == outcome.result.verdict.value
    assert store.verify(outcome.run_id).ok
    return traj


def executions(traj: Trajectory) -> list:
    return [x for turn in traj.turns for x in turn.tool_executions]


def layers(traj: Trajectory) -> list[str | None]:
    return [c.transitions[-1].layer for turn in traj.turns for c in turn.candidates]


# --- time limits and the per-answer cap hold inside one answer -------------------------------

def test_wall_time_holds_inside_one_answer(settings, repo, fault, open_store, tmp_path):
    """Four `sleep 8` in one answer under a 6 s run limit: the first command is
    clamped to the time left, the rest are refused and recorded as refused."""
    fault.script([answer(*[("bash", {"command": f"sleep 8; echo {i} >> ran.txt"}) for i in range(4)])])
    outcome = run(settings, repo, policy_file(tmp_path, max_wall_s=6))

    assert outcome.result.verdict is Verdict.BUDGET_EXHAUSTED, outcome.result.detail
    assert "ran.txt" not in outcome.patch_files, "no sleep ran to completion"
    traj = finished(open_store, outcome)
    done = executions(traj)
    assert [x.tool_name for x in done] == ["bash"] * 4
    ran = [x for x in done if x.exit_code is not None]
    refused = [x for x in done if x.exit_code is None]
    assert len(ran) <= 1 and all(json.loads(x.detail_json)["timed_out"] for x in ran)
    assert len(refused) >= 3 and all("wall-time limit reached" in x.observation for x in refused)
    assert layers(traj)[len(ran):] == ["limit"] * len(refused)


@pytest.mark.parametrize("cap, calls", [(3, 40), (None, 1000)], ids=["cap-3", "default-cap-1000-calls"])
def test_tool_calls_per_answer_are_capped(settings, repo, fault, open_store, tmp_path, cap, calls):
    fault.script([answer(*[("bash", {"command": "echo x >> ran.txt"})] * calls)])
    limits = {"max_turns": 1} | ({"max_tool_calls_per_answer": cap} if cap else {})
    outcome = run(settings, repo, policy_file(tmp_path, **limits))
    allowed = cap or default_policy().limits.max_tool_calls_per_answer

    assert outcome.result.verdict is Verdict.BUDGET_EXHAUSTED
    assert f"+{'x'}" in outcome.patch and outcome.patch.count("\n+x") == allowed, "exactly the cap ran"
    traj = finished(open_store, outcome)
    done = executions(traj)
    assert len(done) == calls
    assert all(x.exit_code == 0 for x in done[:allowed])
    assert all(x.exit_code is None and "max_tool_calls_per_answer" in x.observation for x in done[allowed:])
    assert layers(traj) == ["policy"] * allowed + ["limit"] * (calls - allowed)
    states = [[t.to_state for t in c.transitions] for turn in traj.turns for c in turn.candidates]
    assert states[allowed:] == [["STAGED", "VALIDATING", "REJECTED"]] * (calls - allowed)


# --- every run ends with a recorded verdict ---------------------------------------------------

def infra_error(open_store, outcome: RunOutcome) -> dict:
    traj = finished(open_store, outcome)
    # The first error decides the verdict; a later one (the export of a dead
    # container) is recorded too.
    event, *_ = [e for e in traj.run_events if e.kind == "infra_error"]
    assert event.data["type"] and event.data["message"]
    assert traj.run.verdict_detail and event.data["type"] in traj.run.verdict_detail
    return event.data


# A 1,200-level directory is left to the export's own tests: today's export
# spends minutes on it on the host, before any verdict can be recorded.
EXPORT_ATTACKS = {
    "git-init-in-subdirectory": "mkdir -p sub && cd sub && git init -q && echo x > f && git add f",
    "upper-case-.GIT-config": "mkdir -p .GIT && printf '[core]\\n\\tbare = true\\n' > .GIT/config",
    "3GB-sparse-file": "truncate -s 3G sparse.bin && ls -la sparse.bin",
}


@pytest.mark.parametrize("name", sorted(EXPORT_ATTACKS))
def test_export_attacks_end_with_a_recorded_verdict(settings, repo, fault, open_store, tmp_path, name):
    fault.script([answer(("bash", {"command": EXPORT_ATTACKS[name]}))])
    outcome = run(settings, repo, policy_file(tmp_path, max_turns=1))

    # The export may refuse the workspace (INFRA_ERROR, error recorded) or
    # carry it; it never leaves the run without a verdict.
    traj = finished(open_store, outcome)
    assert outcome.result.verdict in (Verdict.INFRA_ERROR, Verdict.BUDGET_EXHAUSTED)
    if outcome.result.verdict is Verdict.INFRA_ERROR:
        assert "at the end of the run" in infra_error(open_store, outcome)["where"]
    assert [e.kind for e in traj.run_events][-1] == "verdict"


def kill_container_when(docker_client, marker: str, stop: threading.Event, executor_only: bool = False) -> None:
    """Kill our sandbox container (or only its executor, from outside, as
    root) once a command containing ``marker`` runs in it."""
    while not stop.is_set():
        for container in docker_client.containers.list(filters={"label": f"{LABEL_PID}={os.getpid()}"}):
            try:
                code, out = container.exec_run(["ps", "-eo", "args="], user="1000:1000")
            except Exception:  # noqa: BLE001 - the container may be going away
                continue
            if marker.encode() in out:
                if executor_only:
                    container.exec_run(["pkill", "-9", "-f", "-u", "0", "^/usr/bin/python3 -I -S -c"], user="0",
                                      detach=True)
                else:
                    container.kill()
                return
        time.sleep(0.1)


@pytest.mark.parametrize("executor_only", [False, True], ids=["container", "executor"])
def test_a_container_or_executor_that_dies_mid_run_is_an_infra_error(settings, repo, fault, open_store,
                                                                     docker_client, executor_only):
    fault.script([answer(("bash", {"command": "sleep 30; echo crash-me"})), answer(("bash", {"command": "echo next"}))])
    stop = threading.Event()
    killer = threading.Thread(target=kill_container_when, args=(docker_client, "crash-me", stop, executor_only),
                              daemon=True)
    killer.start()
    try:
        outcome = run(settings, repo)
    finally:
        stop.set()
        killer.join(10)

    assert outcome.result.verdict is Verdict.INFRA_ERROR, outcome.result.detail
    error = infra_error(open_store, outcome)
    # Init follows its only child, the executor: the container stops either way.
    assert error["type"] == "ExecutorBroken" and "not running" in error["message"]
    assert fault.pending == 1, "the run stopped at the crash; the next answer was never asked for"


def test_model_cannot_kill_the_main_process_and_the_run_goes_on(settings, repo, fault, open_store):
    kill_all = "kill -9 -1; kill -9 1; kill -9 $(cat /proc/1/task/1/children); echo killed=$?"
    fault.script([answer(("bash", {"command": kill_all})), answer(("bash", {"command": "echo still-here"}))])
    outcome = run(settings.model_copy(update={"max_turns": 2}), repo)

    assert outcome.result.verdict is Verdict.BUDGET_EXHAUSTED, outcome.result.detail
    traj = finished(open_store, outcome)
    first, second = executions(traj)
    assert "killed=0" not in first.observation
    assert second.exit_code == 0 and "still-here" in second.stdout
