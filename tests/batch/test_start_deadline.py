"""The sandbox-start deadline (``--start-timeout``), apart from the per-command
and whole-task deadlines: a real proxy in front of dockerd holds one task's
container create; that start misses its deadline, is recorded as an
infrastructure failure (counted apart as a start timeout, never a model
verdict), the task is retried and passes, and the late start, once dockerd
gets to it, leaves no container behind."""

from __future__ import annotations

import time

import pytest

from orchestrator.composition.batch.driver import BatchPlan, run_batch, start_batch
from orchestrator.composition.batch.pool import PoolOptions
from orchestrator.composition.batch.report import START_TIMEOUT, batch_report
from orchestrator.composition.batch.runner import INFRASTRUCTURE_FAILURE, Deadlines
from orchestrator.composition.batch.start_deadline import SandboxStartTimeout
from sandbox.orphans import LABEL_RUN
from store import Store
from store.write import batches as bstore
from tests.batch.conftest import EXAMPLES as EXAMPLES_DIR
from tests.batch.docker_proxy import StallingDockerProxy
from tests.batch.test_infrastructure import subset

pytestmark = [pytest.mark.docker]


def containers_of(docker_client, run_id: str) -> list:
    # One list call: the high-level list inspects each container after listing
    # it, and fails when one is removed in between (as the abandoned one is).
    return docker_client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})


def test_a_start_past_its_deadline_is_an_infrastructure_failure_retried_and_reported_apart(
        tmp_path, settings, fault_server, fix_scripts, docker_client):
    assert SandboxStartTimeout.__name__ == START_TIMEOUT  # the report recognises the attempt by this name
    fault_server.script_for("leap-400", fix_scripts["leap-400"])
    url = f"http://127.0.0.1:{fault_server.port}/k/{{task_id}}/v1"
    # The held create is let through after 60 s: were the start deadline not
    # enforced, the first attempt would simply pass late and the test fail.
    with StallingDockerProxy(tmp_path / "docker.sock", stall=1, safety_s=60) as proxy, \
            Store.open(settings.store_url) as store:
        slow = settings.model_copy(update={"docker_host": proxy.url})
        options = PoolOptions(workers=1, infra_retries=2, deadlines=Deadlines(task_s=900, start_s=3))
        plan = BatchPlan(tasks_dir=str(EXAMPLES_DIR), model_urls=(url,), options=options)
        batch_id = start_batch(store, subset(("leap-400",)), plan)
        (result,) = run_batch(store, slow, batch_id)
        released_before_end = proxy.release.is_set()
        proxy.release.set()  # dockerd now gets to the abandoned create
        view = bstore.load_batch(store, batch_id)
        summaries = store.summaries([a.run_id for a in view.attempts if a.run_id])
        report = batch_report(view, {s.run.id: s for s in summaries})
        first = view.attempts[0]
        late_run = store.run(first.run_id)
        deadline = time.monotonic() + 120
        while containers_of(docker_client, first.run_id) and time.monotonic() < deadline:
            time.sleep(0.5)
        leaked = containers_of(docker_client, first.run_id)
    assert not released_before_end and proxy.stalled == 1
    assert result.verdict == "PASS", result.error
    assert [a.outcome for a in view.attempts] == [bstore.INFRASTRUCTURE, bstore.MODEL]
    assert first.verdict == INFRASTRUCTURE_FAILURE and first.error.startswith("SandboxStartTimeout: ")
    assert "within 3s" in first.error
    # The run had been recorded before its sandbox start: it ends INFRA_ERROR, not as the model's failure.
    assert late_run.verdict == "INFRA_ERROR" and "sandbox did not start" in (late_run.verdict_detail or "")
    assert report.start_timeouts == 1 and report.infra_failures == 1
    assert report.verdicts == {"PASS": 1} and report.passed == report.done == 1
    assert leaked == [], "the start abandoned at its deadline left its container behind"


def test_a_start_abandoned_at_its_deadline_is_removed_when_its_create_lands_however_late(
        tmp_path, sandbox_image, docker_client):
    """The failure seen under load: the Docker client itself gives up on the
    held create (its own timeout, here 2 s), so the late start ends in an
    error, not a sandbox to close; dockerd still carries the create out once
    it gets to it, far past the deadline and past that error, while other
    processes load the machine. The container of the abandoned run is
    removed when it lands: dockerd's own events show it created, then
    destroyed, and none is left."""
    import subprocess
    import sys
    import uuid

    import docker

    from orchestrator.composition.batch.start_deadline import BoundedStart
    from policies import default_policy
    from sandbox import Sandbox

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def mean(values):\n    return sum(values) / len(values)\n")
    run_id = uuid.uuid4().hex
    since = int(time.time()) - 1
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        with StallingDockerProxy(tmp_path / "docker.sock", stall=1, safety_s=300) as proxy:
            impatient = docker.DockerClient(base_url=proxy.url, timeout=2)
            bounded = BoundedStart(1.0, Sandbox.start, linger_s=300)
            with pytest.raises(SandboxStartTimeout):
                bounded(impatient, sandbox_image, default_policy(), repo, run_id=run_id, runtime="runc")
            # The client's own timeout ends the abandoned start in an error: its thread starts watching.
            wait_until(lambda: bounded.watching, 120)
            assert proxy.stalled == 1 and not proxy.release.is_set()
            proxy.release.set()  # dockerd now gets to the create, long after everyone gave up on it
            wait_until(lambda: events_of(docker_client, run_id, since, "destroy"), 120)
            leaked = containers_of(docker_client, run_id)
            for stop in bounded.watching:
                stop.set()
    finally:
        for burner in load:
            burner.kill()
            burner.wait()
    assert events_of(docker_client, run_id, since, "create"), "the held create never landed: nothing was tested"
    assert leaked == [], "the start abandoned at its deadline left its container behind"


def wait_until(condition, limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.2)


def events_of(docker_client, run_id: str, since: int, action: str) -> list:
    return list(docker_client.api.events(since=since, until=int(time.time()) + 1, decode=True,
                                         filters={"type": "container", "event": action,
                                                  "label": f"{LABEL_RUN}={run_id}"}))
