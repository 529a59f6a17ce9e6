"""Fixtures for sandbox tests. Every sandbox a test creates goes through
``start_sandbox``, which asserts the container's hardening field by field
from ``docker inspect`` (written out here, independently of sandbox.audit)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from policies import Policy, default_policy
from sandbox import Sandbox
from tests.conftest import SUITE_RUNTIMES, require

CANARY_SECRET = "escrow-canary-7f3c9a1d5e"
CANARY_ENV = "ESCROW_TEST_CANARY_SECRET"


def assert_hardened(docker_client, sandbox: Sandbox, policy: Policy) -> None:
    info = docker_client.api.inspect_container(sandbox.container.id)
    host, config = info["HostConfig"], info["Config"]
    r = policy.resources
    assert info["State"]["Running"] is True
    assert host["Runtime"] == sandbox.spec.runtime
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    # Only the executor's: kill(-1), becoming the sandbox user, emptying its bounding set.
    # Under gVisor the executor also holds gVisor's SYS_ADMIN, for its
    # children's PID namespaces (sandbox/command_namespace.py).
    extra = ["SYS_ADMIN"] if sandbox.spec.runtime == "runsc" else []
    assert sorted(host["CapAdd"]) == sorted(["KILL", "SETGID", "SETPCAP", "SETUID", *extra])
    assert host["Privileged"] is False
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert config["User"] == "0:0"  # init and the executor; commands run as 1000:1000, without capabilities
    assert host["LogConfig"]["Type"] == "none"  # the executor's channel is never written to disk
    assert host["ReadonlyRootfs"] is True
    assert host["Tmpfs"]["/tmp"].startswith("rw,nosuid,nodev,noexec,")
    assert f"size={r.tmp_mb * 2**20}" in host["Tmpfs"]["/tmp"]
    assert f"size={r.workspace_mb * 2**20}" in host["Tmpfs"]["/workspace"]
    assert set(host["Tmpfs"]) == {"/tmp", "/workspace"}
    limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]}
    assert limits["nofile"] == (1024, 1024) and limits["core"] == (0, 0)
    if sandbox.spec.runtime == "runsc":
        # gVisor's kernel holds the guest to r.pids processes (RLIMIT_NPROC);
        # the cgroup counts its host tasks, about 8-11 a guest process.
        assert limits["nproc"] == (r.pids, r.pids)
        assert host["PidsLimit"] == r.pids * 32 + 128
    else:
        assert "nproc" not in limits
        assert host["PidsLimit"] == r.pids
    # The executor's arguments: each command's RLIMIT_AS (and the guest's
    # memory), whether each child gets a PID namespace of its own, and the
    # processes at which a command is killed.
    command_memory, namespaces, processes = config["Cmd"][-3:]
    assert namespaces == ("pidns" if sandbox.spec.runtime == "runsc" else "-")
    assert processes == (str(r.pids) if sandbox.spec.runtime == "runsc" else "0")
    if sandbox.spec.runtime == "runsc":
        # Each command is held to the policy's memory; the cgroup adds gVisor's
        # kernel share, 4 MiB a process and 128 MiB.
        assert command_memory == str(r.memory_mb * 2**20)
        assert host["Memory"] == (r.memory_mb + r.pids * 4 + 128) * 2**20
    else:
        assert command_memory == "0"
        assert host["Memory"] == r.memory_mb * 2**20
    assert host["MemorySwap"] == host["Memory"]
    assert host["NanoCpus"] == int(r.cpus * 1e9)
    assert host["Init"] is True
    assert not host.get("Binds")
    assert [m for m in info["Mounts"] if m["Type"] != "tmpfs"] == []
    assert config["Labels"]["escrow.run_id"] == sandbox.run_id
    assert config["Labels"]["escrow.owner_pid"] == str(os.getpid())
    assert not [e for e in config.get("Env") or [] if not e.startswith("PATH=")]


@pytest.fixture
def demo_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init"], cwd=repo, check=True)
    return repo



@pytest.fixture(scope="module", params=SUITE_RUNTIMES)
def sandbox_runtime(request, docker_client) -> str:
    """The runtime of the module's sandboxes, one module pass per runtime."""
    from sandbox.runtime import registered_runtimes

    require(request.param in registered_runtimes(docker_client), f"the {request.param} runtime in dockerd")
    return request.param


@pytest.fixture
def start_sandbox(docker_client, sandbox_image, sandbox_runtime):
    """Factory: start a sandbox, assert its hardening, remove it at teardown."""
    started: list[Sandbox] = []

    def start(repo: Path, policy: Policy | None = None) -> Sandbox:
        policy = policy or default_policy()
        sandbox = Sandbox.start(docker_client, sandbox_image, policy, repo, runtime=sandbox_runtime)
        started.append(sandbox)
        assert_hardened(docker_client, sandbox, policy)
        return sandbox

    yield start
    for sandbox in started:
        sandbox.close()


@pytest.fixture
def host_canary(tmp_path_factory, monkeypatch):
    """A secret on the host (env var and file) that no sandbox output may contain."""
    directory = tmp_path_factory.mktemp("canary")
    secret = directory / "secret.txt"
    secret.write_text(CANARY_SECRET)
    monkeypatch.setenv(CANARY_ENV, CANARY_SECRET)
    digest = hashlib.sha256(secret.read_bytes()).hexdigest()
    yield secret
    assert hashlib.sha256(secret.read_bytes()).hexdigest() == digest, "host canary file changed"


def all_at_once(action: Callable[[], object], callers: int) -> list[BaseException]:
    """Run ``action`` from ``callers`` threads released together; what they raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(callers)

    def call() -> None:
        barrier.wait()
        try:
            action()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return errors
