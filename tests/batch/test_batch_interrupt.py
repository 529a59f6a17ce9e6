"""Ctrl-C on ``escrow batch`` as a real subprocess, SIGINT at its default
disposition as a terminal delivers it: the runs in flight end CANCELED with
their sandboxes removed, no attempt starts after it, their attempts read
``interrupted`` (neither a model verdict nor an infrastructure failure), the
exit code is 130 with a clean message, and ``--resume`` reruns exactly the
tasks without a model verdict."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import docker
import pytest

from sandbox.hardening import LABEL_RUN
from store import Store
from store.write import batches as bstore
from tests.batch.conftest import subset_task_file
from tests.batch.test_batch_cli import _batch_ids, attempts, wait_for
from tests.processes import ESCROW

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CHOSEN = ("calc-mean", "roman-four", "kv-split-once", "leap-400", "clamp-bounds")


def as_from_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a test run started in the background inherits it ignored


def test_ctrl_c_cancels_the_runs_in_flight_and_resume_reruns_only_them(tmp_path, fault_server, fix_scripts,
                                                                        sandbox_image):
    for task_id in CHOSEN:  # slow enough that Ctrl-C lands while calls stream; each new run from the start,
        # as `escrow fault-server --fixes` plays them (docs/BATCH.md)
        fault_server.script_for(task_id, [s.model_copy(update={"tokens_per_s": 10.0}) for s in fix_scripts[task_id]],
                                restart=True)
    home, db = tmp_path / "home", tmp_path / "home" / "escrow.db"
    env = {**os.environ, "ESCROW_HOME": str(home)}
    url = f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1"
    driver = subprocess.Popen(
        [str(ESCROW), "batch", str(subset_task_file(tmp_path, CHOSEN)), "--model-url", url, "--workers", "2",
         "--lease", "2", "--context-window", "8192", "--tokenizer", "cl100k_base", "--max-turns", "6", "--json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal)
    try:
        in_flight = wait_for(lambda: {a.run_id for a in attempts(db) if a.outcome == bstore.STARTED and a.run_id},
                             "a run in flight", proc=driver)
        # Ctrl-C while a call streams: that run has taken a step of its script.
        wait_for(lambda: any(not s.all_sent for s in fault_server.streams), "a call streaming", proc=driver)
        sent = time.time()
        driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, err
    assert "Traceback" not in err
    assert "interrupted" in err and "escrow batch --resume" in err
    assert out == ""  # no report on stdout: the batch did not end

    after = attempts(db)
    stopped = [a for a in after if a.outcome == bstore.INTERRUPTED]
    assert stopped
    assert not [a for a in after if a.outcome == bstore.STARTED]
    assert not [a for a in after if a.started_at > sent]  # nothing started after Ctrl-C
    assert not [a for a in after if a.outcome == bstore.INFRASTRUCTURE]
    with Store.open(f"sqlite:///{db}", readonly=True, create=False) as store:
        for attempt in stopped:
            run = store.run(attempt.run_id)
            assert (run.status, run.verdict) == ("finished", "CANCELED")
            assert store.verify(attempt.run_id).ok
        (batch_id,) = _batch_ids(store)
    # A run seen in flight may still finish its last turn before the stop
    # reaches it (the poll is not the signal; seen once in a full run: both
    # runs seen in flight ended PASS, the two started after them were
    # stopped): it then keeps its verdict. A stop that came late would start
    # attempts after the signal, which the check above refuses.
    outcome = {a.run_id: a.outcome for a in after}
    assert all(outcome[run_id] in (bstore.INTERRUPTED, bstore.MODEL) for run_id in in_flight)
    left = docker.from_env().containers.list(all=True, filters={"label": LABEL_RUN})
    assert not {c.labels[LABEL_RUN] for c in left} & {a.run_id for a in stopped}  # each removed its sandbox

    status = subprocess.run([str(ESCROW), "batch", "status", batch_id, "--json"], capture_output=True, text=True,
                            env=env)
    shown = json.loads(status.stdout)
    assert shown["interrupted"] == len({a.task_id for a in stopped}) and shown["infra_failures"] == 0

    done_before = {a.task_id for a in after if a.outcome == bstore.MODEL}
    # Nothing re-scripted: the canceled runs' tasks play their fixes from the start again.
    resumed = subprocess.run([str(ESCROW), "batch", "--resume", batch_id[:8], "--workers", "2", "--json"],
                             capture_output=True, text=True, env=env, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["n_tasks"] == report["done"] == report["passed"] == len(CHOSEN)
    assert report["interrupted"] == 0
    final = attempts(db)
    model = [a for a in final if a.outcome == bstore.MODEL]
    assert sorted(a.task_id for a in model) == sorted(CHOSEN)  # each task counted once
    rerun = {a.task_id for a in final if a not in after}
    assert rerun == set(CHOSEN) - done_before  # only the tasks without a model verdict ran again
    subprocess.run([str(ESCROW), "sandbox", "gc"], capture_output=True, env=env)
