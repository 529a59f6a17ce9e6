"""The first submit's verifier container and pre-pass, started while the
agent works (``ToolBox.start_early``, ``sandbox.early_verifier``): the
submit uses that container and that pre-pass's list (counted by the real
``fresh`` calls and the thread that made them, not by time), and a run that
ends without using it, is canceled, or is killed leaves no container."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

from policies import default_policy
from sandbox import ToolBox, remove_orphans
from sandbox.container import Sandbox
from sandbox.hardening import LABEL_PID, LABEL_RUN
from tests.container_processes import commands_in

pytestmark = [pytest.mark.docker]

VERIFY = "python3 -m pytest -q -p no:cacheprovider"
SLOW_VERIFY = f"sleep 300; {VERIFY}"  # the pre-pass runs the verify command, collect-only: it sleeps


def counted_fresh(monkeypatch, sandbox: Sandbox) -> list[tuple[str, str, str]]:
    """Every container ``fresh`` starts: (role, the starting thread, its name)."""
    starts: list[tuple[str, str, str]] = []
    real = sandbox.fresh

    def fresh(archive, role):
        made = real(archive, role)
        starts.append((role, threading.current_thread().name, made.container.name))
        return made

    monkeypatch.setattr(sandbox, "fresh", fresh)
    return starts


def run_containers(docker_client, run_id: str) -> list[str]:
    return [c.name for c in docker_client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})]


def wait_for(check, what: str, limit_s: float = 120.0):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if found := check():
            return found
        time.sleep(0.1)
    pytest.fail(f"never saw {what}")


def sleeping_verifier(docker_client, run_id: str, owner: int | None = None):
    """The early verifier's container once its pre-pass runs (the slow verify command)."""
    labels = [f"{LABEL_RUN}={run_id}"] + ([f"{LABEL_PID}={owner}"] if owner is not None else [])
    return wait_for(lambda: [c for c in docker_client.containers.list(filters={"label": labels})
                             if "-verify" in c.name and any("sleep 300" in p for p in commands_in(c))],
                    "the early pre-pass running")[0]


def test_the_first_submit_uses_the_early_container_and_its_pre_pass(start_sandbox, demo_repo, monkeypatch,
                                                                     docker_client):
    sandbox = start_sandbox(demo_repo)
    starts = counted_fresh(monkeypatch, sandbox)
    box = ToolBox(sandbox, default_policy(), verifier_command=VERIFY)
    box.start_early()
    assert box.command("bash", "sed -i 's/a - b/a + b/' calc.py && echo 'def test_new(): pass' > test_new.py",
                       None).ok
    first = box.submit()
    assert first.verifier_passed, first.observation
    # One container in all, started by the early thread: the submit started none.
    [(role, thread, name)] = starts
    assert (role, thread) == ("verify", "escrow-early-verifier")
    assert first.evidence is not None and first.evidence.source == "collected"
    assert first.evidence.required == 1, "collected from the starting copy before the model's test_new.py"
    assert name not in run_containers(docker_client, sandbox.run_id), "the used container is removed"
    second = box.submit()
    assert second.verifier_passed and second.evidence is not None and second.evidence.required == 1
    assert [(r, t) for r, t, _ in starts[1:]] == [("verify", threading.current_thread().name)]


def test_after_a_failed_submit_the_next_ones_container_is_started_early(start_sandbox, demo_repo, monkeypatch):
    sandbox = start_sandbox(demo_repo)
    starts = counted_fresh(monkeypatch, sandbox)
    box = ToolBox(sandbox, default_policy(), verifier_command=VERIFY)
    box.start_early()
    failed = box.submit()
    assert failed.verifier_passed is False and failed.evidence is not None and failed.evidence.required == 1
    assert box.command("bash", "sed -i 's/a - b/a + b/' calc.py", None).ok
    passed = box.submit()
    assert passed.verifier_passed and passed.evidence is not None and passed.evidence.required == 1
    # Each submit's container was started by the early thread; none after the pass (the run ends).
    assert [(r, t) for r, t, _ in starts] == [("verify", "escrow-early-verifier")] * 2
    assert box._early is None


def test_an_early_verifier_whose_start_fails_leaves_the_submit_to_start_its_own(start_sandbox, demo_repo,
                                                                               monkeypatch):
    """The early start failed (here its container never started): the submit
    does the pre-pass itself, as without an early start, and judges by it."""
    sandbox = start_sandbox(demo_repo)
    real = sandbox.fresh
    calls: list[str] = []

    def fresh(archive, role):
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            raise OSError("the daemon dropped the early create")
        return real(archive, role)

    monkeypatch.setattr(sandbox, "fresh", fresh)
    box = ToolBox(sandbox, default_policy(), verifier_command=VERIFY)
    box.start_early()
    assert box.command("bash", "sed -i 's/a - b/a + b/' calc.py", None).ok
    result = box.submit()
    assert result.verifier_passed and result.evidence is not None, result.observation
    assert (result.evidence.source, result.evidence.required) == ("collected", 1)
    assert calls == ["escrow-early-verifier", threading.current_thread().name]


@pytest.mark.parametrize("ending", ["run ends", "canceled at submit"])
def test_an_early_verifier_is_gone_when_the_run_ends_without_it(start_sandbox, demo_repo, docker_client, ending):
    sandbox = start_sandbox(demo_repo)
    cancel = threading.Event()
    box = ToolBox(sandbox, default_policy(), verifier_command=SLOW_VERIFY, cancel=cancel)
    box.start_early()
    thread = box._early
    early = sleeping_verifier(docker_client, sandbox.run_id)
    if ending == "canceled at submit":  # Ctrl-C while the submit awaits the pre-pass
        threading.Timer(1.0, cancel.set).start()
        result = box.submit()
        assert not result.verifier_passed
        assert early.name not in run_containers(docker_client, sandbox.run_id)
    sandbox.close()  # how every run ends: done, timed out, canceled, out of turns
    assert run_containers(docker_client, sandbox.run_id) == []
    assert thread is not None and thread.done and box._early is None, "no later submit's either"


CHILD = """
import sys, time
from pathlib import Path
import docker
from policies import default_policy
from sandbox import Sandbox, ToolBox
sandbox = Sandbox.start(docker.from_env(), sys.argv[1], default_policy(), Path(sys.argv[2]), runtime=sys.argv[3])
ToolBox(sandbox, default_policy(), verifier_command=sys.argv[4]).start_early()
print(sandbox.run_id, flush=True)
time.sleep(600)
"""


@pytest.mark.solo  # a sandbox started beside it could sweep the orphan first
def test_a_killed_runs_early_verifier_is_removed_by_the_orphan_sweep(docker_client, sandbox_image, sandbox_runtime,
                                                                    demo_repo):
    child = subprocess.Popen([sys.executable, "-c", CHILD, sandbox_image, str(demo_repo), sandbox_runtime,
                              SLOW_VERIFY], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        run_id = child.stdout.readline().strip()
        early = sleeping_verifier(docker_client, run_id, owner=child.pid)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert early.name in run_containers(docker_client, run_id), "the kill left it behind"
    assert early.name in remove_orphans(docker_client)
    assert run_containers(docker_client, run_id) == []


def test_repositories_of_views_made_at_once_are_each_whole(start_sandbox, demo_repo, tmp_path):
    """The early verifier makes its view's repository in a thread while a
    submit may make another: each is made in one fixed place of the private
    git dir, so they are made one at a time, and each holds its view."""
    import io
    import itertools
    import tarfile

    from tests.sandbox.conftest import all_at_once

    sandbox = start_sandbox(demo_repo)
    base = sandbox.starting.entries()
    views = [{p: e for p, e in base.items() if p != b"calc.py"}, base] * 3  # a denied path's view, and the whole
    order = itertools.count()
    made: dict[int, bytes] = {}

    def make() -> None:
        n = next(order)
        made[n] = sandbox.starting.repo(views[n])

    assert all_at_once(make, len(views)) == []
    for n, repo in made.items():
        target = tmp_path / f"repo{n}"
        with tarfile.open(fileobj=io.BytesIO(repo + b"\0" * 1024), mode="r:") as tar:
            tar.extractall(target, filter="data")
        listed = subprocess.run(["git", f"--git-dir={target / '.git'}", "ls-tree", "-r", "--name-only", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.split()
        assert sorted(listed) == sorted(p.decode() for p in views[n]), n
