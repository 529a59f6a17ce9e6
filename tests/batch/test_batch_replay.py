"""A batch run replays as a plain run does: its starting workspace is kept
(read-only, by the digest of its files) after the batch's scratch copy is
gone, so ``escrow replay RUN --reexecute`` and ``--fork-at N`` work on it; a
kept workspace that changed is refused; ``escrow gc`` frees it once no run
records it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.composition.batch.driver import BatchPlan, run_batch, start_batch
from orchestrator.composition.batch.pool import PoolOptions
from orchestrator.composition.batch.tasks import load_task_file
from orchestrator.composition.launch.compose import kept_workspaces
from orchestrator.exit_codes import ExitCode
from sandbox.kept import tree_digest
from store import Store
from tests.batch.conftest import EXAMPLES
from tests.processes import ESCROW

pytestmark = [pytest.mark.docker]

TASK = "calc-mean"


def escrow(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ESCROW), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "ESCROW_HOME": str(home)})


def test_a_batch_run_is_reexecuted_and_forked_from_its_kept_workspace_and_gc_frees_it(settings, fault_server,
                                                                                      fix_scripts):
    task_file = load_task_file(EXAMPLES / "tasks.jsonl")
    subset = task_file.model_copy(update={"tasks": tuple(t for t in task_file.tasks if t.id == TASK)})
    steps = fix_scripts[TASK]
    fault_server.script_for(TASK, steps)
    url = f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1"
    with Store.open(settings.store_url) as store:
        plan = BatchPlan(tasks_dir=str(EXAMPLES), model_urls=(url,), options=PoolOptions(workers=1))
        (result,) = run_batch(store, settings, start_batch(store, subset, plan))
        assert result.verdict == "PASS", result
        run = store.run(result.run_id)
    home, kept = settings.home, Path(run.repo)
    # The run recorded its kept start, not the scratch checkout the attempt removed.
    assert kept.parent == kept_workspaces(settings).resolve() and kept.name == run.config["workspace_sha256"]
    assert tree_digest(kept) == kept.name
    assert not {(kept / "calc.py").stat().st_mode & 0o222, kept.stat().st_mode & 0o222} - {0}  # read-only

    reexecuted = escrow(home, "replay", result.run_id, "--reexecute", "--json")
    assert reexecuted.returncode in (0, ExitCode.REPLAY_NOISE_ONLY), reexecuted.stdout + reexecuted.stderr
    again = json.loads(reexecuted.stdout)
    # Identical (exit 0), or differing only in volatile output (exit 10): the
    # verifier's "2 passed in 0.01s" read 0.02s on a loaded machine.
    assert (reexecuted.returncode, again["identical"]) == (0, True) or (
        reexecuted.returncode == ExitCode.REPLAY_NOISE_ONLY and again["noise_only"] is True), again
    assert again["request_mismatches"] == [] and all(d["kind"] == "noise" for d in again["drifts"]), again

    fault_server.script_for(TASK, steps[1:])  # the fork's live turns, from turn 1 on
    forked = escrow(home, "replay", result.run_id, "--fork-at", "1", "--json")
    assert forked.returncode == 0, forked.stdout + forked.stderr
    report = json.loads(forked.stdout)
    assert report["verdict"] == "PASS" and report["forked_at_turn"] == 1
    with Store.open(settings.store_url, readonly=True) as store:
        assert store.run(report["replay_run_id"]).repo == str(kept)  # a fork of it replays from the same start

    # A kept workspace altered since the run is refused before any sandbox starts.
    (kept / "calc.py").chmod(0o644)
    with (kept / "calc.py").open("a") as changed:
        changed.write("# edited\n")
    refused = escrow(home, "replay", result.run_id, "--reexecute")
    assert refused.returncode == 2 and "changed since the run" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr

    dry = escrow(home, "gc", "--older-than", "0s", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    counted = json.loads(dry.stdout)
    assert counted["workspaces_deleted"] == 1 and counted["workspace_bytes_freed"] > 0 and kept.is_dir()
    done = escrow(home, "gc", "--older-than", "0s")
    assert done.returncode == 0, done.stderr
    assert "deleted 1 kept workspaces" in done.stdout and not kept.exists()
    escrow(home, "sandbox", "gc")
