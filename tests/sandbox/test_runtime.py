"""The sandbox's runtime: the choice (auto, runsc, runc), gVisor proven from
inside by the doctor, and the statx shim that lets coreutils run under runsc.

The rest of tests/sandbox runs under the runtimes in SUITE_RUNTIMES; this
module checks what holds under runsc today, on a real dockerd with Debian's
runsc registered (CI's set-up registers it; without it these fail in CI)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from policies import default_policy
from sandbox import Sandbox
from sandbox.doctor import run_doctor
from sandbox.execution import ExecLimits
from sandbox.runtime import choose_runtime, registered_runtimes
from tests.conftest import require
from tests.sandbox.conftest import assert_hardened

pytestmark = [pytest.mark.docker]

ESCROW = Path(sys.executable).parent / "escrow"
LIMITS = ExecLimits(timeout_s=30, stdout_cap=8192, stderr_cap=4096)


@pytest.fixture(scope="module")
def runsc(docker_client) -> str:
    require("runsc" in registered_runtimes(docker_client), "gVisor's runsc registered with dockerd")
    return "runsc"


def test_auto_takes_runsc_when_dockerd_has_it_and_says_why(docker_client, runsc):
    choice = choose_runtime(docker_client, "auto")
    assert (choice.name, choice.wanted) == ("runsc", "auto") and "gVisor" in choice.why
    assert choose_runtime(docker_client, "runc").name == "runc"


@pytest.mark.parametrize("runtime", ["runsc", "runc"])
def test_coreutils_stat_and_ls_work_and_the_kernel_is_the_one_asked_for(docker_client, sandbox_image, runsc,
                                                                         tmp_path, runtime):
    # Without the image's statx shim, ls and stat fail under runsc ("Invalid argument").
    (tmp_path / "a.txt").write_text("abc\n")
    with Sandbox.start(docker_client, sandbox_image, default_policy(), tmp_path, runtime=runtime) as sandbox:
        assert_hardened(docker_client, sandbox, default_policy())
        result = sandbox.bash("ls -la a.txt && stat -c %s a.txt && cat /etc/ld.so.preload; "
                              "dmesg 2>/dev/null | head -1", LIMITS)
        out = result.stdout.text()
    assert result.exit_code == 0, result.stderr.text()
    assert "a.txt" in out and "\n4\n" in out and "statx_compat.so" in out
    assert ("Starting gVisor" in out) == (runtime == "runsc")


def test_the_doctor_proves_gvisor_from_inside_and_names_what_differs(docker_client, sandbox_image, runsc):
    report = run_doctor(docker_client, sandbox_image, choose_runtime(docker_client, "runsc"))
    checks = {check.name: check for check in report.checks}
    assert checks["inside kernel"].ok and checks["inside kernel"].detail == "gVisor"
    assert checks["inspect HostConfig.Runtime"].ok and "'runsc'" in checks["inspect HostConfig.Runtime"].detail
    # gVisor would let another uid list the executor's descriptors and read
    # its environ and maps; a command's own PID namespace hides it instead.
    assert report.ok, [c for c in report.checks if not c.ok]
    assert checks["executor /proc"].detail.endswith("hidden hidden hidden hidden")
    assert checks["executor signals"].detail.startswith("kill -9 from a command: hidden")
    assert "CapEff:00000000002001e0" in checks["executor identity"].detail


def test_the_doctor_under_runc_sees_the_host_kernel_and_passes(docker_client, sandbox_image):
    report = run_doctor(docker_client, sandbox_image, choose_runtime(docker_client, "runc"))
    checks = {check.name: check for check in report.checks}
    assert report.ok, [c for c in report.checks if not c.ok]
    assert checks["inside kernel"].detail.startswith("host ")


def test_the_cli_says_which_runtime_and_refuses_one_it_does_not_know(docker_client, sandbox_image, runsc, tmp_path):
    env = {**os.environ, "ESCROW_HOME": str(tmp_path)}
    shown = subprocess.run([str(ESCROW), "sandbox", "doctor", "--runtime", "runsc", "--json"], env=env,
                           capture_output=True, text=True, timeout=300)
    checks = {c["name"]: c for c in json.loads(shown.stdout)["checks"]}
    assert checks["runtime"]["detail"].startswith("runsc") and checks["inside kernel"]["detail"] == "gVisor"
    assert shown.returncode == 0, [c for c in checks.values() if not c["ok"]]
    bad = subprocess.run([str(ESCROW), "run", "x", "--repo", str(tmp_path), "--verify", "true",
                          "--runtime", "kata"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "sandbox_runtime" in bad.stderr and "runsc" in bad.stderr


def test_the_verifiers_fresh_container_runs_under_the_same_runtime(docker_client, sandbox_image, runsc, tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    with Sandbox.start(docker_client, sandbox_image, default_policy(), tmp_path, runtime="runsc",
                       run_id=f"rt-{uuid.uuid4().hex[:12]}") as sandbox:
        sandbox.bash("echo b > a.txt", LIMITS)
        with sandbox.fresh(sandbox.starting.archive_of(sandbox.patch()), "verify") as verifier:
            assert verifier.inspect()["HostConfig"]["Runtime"] == "runsc"
            kernel = verifier.bash("dmesg | head -1; cat a.txt", LIMITS).stdout.text()
    assert "Starting gVisor" in kernel and kernel.endswith("b\n")


@pytest.mark.parametrize("name", ["unshare-newuser", "clone-newuser", "unshare-cli"])
def test_under_runsc_a_command_makes_no_user_namespace(docker_client, sandbox_image, runsc, tmp_path, name):
    # gVisor's kernel gives an unprivileged user a user namespace (`unshare -r
    # id` printed uid=0 before the command filter); only the filter stops it,
    # so this fails under runsc if the executor stops installing it.
    from tests.sandbox.test_attacks import NAMESPACE_PROBES

    if name == "unshare-cli":
        command, refused = "unshare -r id 2>&1; echo rc=$?", "rc=1"
    else:
        probe, refused = NAMESPACE_PROBES[name]
        code = f"import ctypes, os\nc = ctypes.CDLL(None, use_errno=True)\n{probe}"
        command = f"python3 -c {shlex.quote(code)}"
    (tmp_path / "a.txt").write_text("a\n")
    with Sandbox.start(docker_client, sandbox_image, default_policy(), tmp_path, runtime="runsc",
                       run_id=f"rt-{uuid.uuid4().hex[:12]}") as sandbox:
        out = sandbox.bash(command, LIMITS).stdout.text()
    assert out.endswith(f"{refused}\n") and "uid=0" not in out, out


def test_dockerd_runs_the_pinned_runsc_on_the_ptrace_platform(docker_client, sandbox_image, runsc):
    """What scripts/setup.sh pins (bookworm-backports' build) is the package
    installed and the binary dockerd's runsc runtime runs, on the ptrace
    platform, and a container under it boots gVisor."""
    setup = (Path(__file__).resolve().parents[2] / "scripts" / "setup.sh").read_text()
    pinned = next(line.split('"')[1] for line in setup.splitlines() if line.startswith("RUNSC_VERSION="))
    installed = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "runsc"], capture_output=True, text=True)
    assert installed.stdout == pinned
    runtime = docker_client.info()["Runtimes"]["runsc"]
    assert runtime["path"] == "/usr/bin/runsc" and "--platform=ptrace" in runtime.get("runtimeArgs", [])
    shown = docker_client.containers.run(sandbox_image, ["dmesg"], runtime="runsc", network_mode="none",
                                         remove=True)
    assert b"Starting gVisor" in shown
    version = subprocess.run(["/usr/bin/runsc", "--version"], capture_output=True, text=True).stdout
    assert pinned.split("-")[0] in version  # 0.0~20240729.0


# Processes that each stay under the policy's memory but together pass it:
# under runc the cgroup's OOM killer takes one; gVisor has none, so the
# executor watches the guest's own account and kills the command's processes
# at the policy's memory, well before the cgroup (which adds gVisor's kernel
# share) would end the whole sandbox.
MANY = ("for i in $(seq {n}); do python3 -c \"x = bytearray({mb} * 2**20); import time; time.sleep(3)\" & done; "
        "wait; echo finished")


@pytest.mark.parametrize(("n", "mb"), [(12, 100), (3, 400)], ids=["12x100MB", "3x400MB"])
def test_under_runsc_a_guest_over_the_memory_loses_its_command_not_the_sandbox(docker_client, sandbox_image, runsc,
                                                                                tmp_path, n, mb):
    (tmp_path / "a.txt").write_text("a\n")
    with Sandbox.start(docker_client, sandbox_image, default_policy(), tmp_path, runtime="runsc",
                       run_id=f"rt-{uuid.uuid4().hex[:12]}") as sandbox:
        outcome = sandbox.bash(MANY.format(n=n, mb=mb), ExecLimits(timeout_s=30, stdout_cap=8192, stderr_cap=8192))
        assert outcome.exit_code == 137 and "finished" not in outcome.stdout.text()
        assert "memory (1024 MiB) ran out" in outcome.stderr.text()
        assert sandbox.bash("echo alive", LIMITS).stdout.text() == "alive\n"
        assert sandbox.inspect()["State"]["Running"] is True


def test_under_runsc_a_command_under_the_memory_is_left_alone(docker_client, sandbox_image, runsc, tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    with Sandbox.start(docker_client, sandbox_image, default_policy(), tmp_path, runtime="runsc",
                       run_id=f"rt-{uuid.uuid4().hex[:12]}") as sandbox:
        outcome = sandbox.bash(MANY.format(n=3, mb=150), ExecLimits(timeout_s=30, stdout_cap=8192, stderr_cap=8192))
        assert (outcome.exit_code, outcome.stdout.text()) == (0, "finished\n"), outcome.stderr.text()
