"""A batch's run SIGKILLed (its driver killed) at each phase of a turn reads
``crashed`` once its lease lapses, everywhere a run is read, on the local
pool and on a real two-node Ray cluster (where the run lives in a Ray worker
that Ray ends after its driver died). The phases and the readers are those
of tests/e2e/test_killed_runs.py: the model call, the tool command, the
verification and a turn's end."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.batch.ray_cluster import RayCluster, processes
from tests.e2e.test_killed_runs import (
    LEASE_S,
    PHASES,
    escrow,
    example_repo,
    home_for,
    kill,
    killed_reads_crashed,
    store_url,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def start_batch(tmp: Path, server, image: str, verify: str, ray: RayCluster | None) -> object:
    tasks = tmp / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "killed", "repo": str(example_repo(tmp)), "task": "fix mean()",
                                 "verify": verify}) + "\n")
    on_ray = ["--executor", "ray", "--address", ray.address] if ray is not None else []
    return escrow(home_for(tmp, image), "batch", str(tasks), "--model-url", server.base_url, "--db", store_url(tmp),
                  "--workers", "1", "--lease", str(LEASE_S), "--infra-retries", "0", "--tokenizer", "cl100k_base",
                  "--context-window", "8192", "--max-turns", "4", *on_ray)


@pytest.mark.parametrize("phase", list(PHASES))
def test_a_local_batch_run_killed_reads_crashed(phase, tmp_path, fault_server, sandbox_image, docker_client):
    fault_server.script(list(PHASES[phase].script))
    proc = start_batch(tmp_path, fault_server, sandbox_image, PHASES[phase].verify, None)
    killed_reads_crashed(tmp_path, proc, docker_client, PHASES[phase], fault_server)


def ray_attempts() -> set[int]:
    """The Ray worker processes running an attempt (Ray titles a worker by
    the function it runs)."""
    return {pid for pid, (_, cmd) in processes().items() if cmd.startswith("ray::attempt_on_worker")}


def kill_driver(proc: subprocess.Popen, timeout_s: float = 60) -> float:
    """Kills the batch's driver; returns when Ray has ended the worker that
    held the run, the time the run's own process is known gone."""
    workers = ray_attempts()
    assert workers, "no Ray worker runs the attempt"
    kill(proc)
    deadline = time.monotonic() + timeout_s
    while workers & ray_attempts():
        assert time.monotonic() < deadline, "Ray never ended the killed driver's worker"
        time.sleep(0.1)
    return time.time()


@pytest.mark.parametrize("phase", list(PHASES))
def test_a_ray_batch_run_killed_reads_crashed(phase, tmp_path, ray_cluster, fault_server, sandbox_image,
                                              docker_client):
    fault_server.script(list(PHASES[phase].script))
    proc = start_batch(tmp_path, fault_server, sandbox_image, PHASES[phase].verify, ray_cluster)
    killed_reads_crashed(tmp_path, proc, docker_client, PHASES[phase], fault_server, kill_run=kill_driver)
