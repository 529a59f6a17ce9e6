"""``escrow sandbox doctor``: is the daemon reachable, is the image there, and
is every hardening option actually in effect inside a throwaway container?"""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from pathlib import Path

import docker

from orchestrator.contract import Frozen
from orchestrator.toolset import ReadFileArgs
from policies import default_policy
from sandbox.container import Sandbox
from sandbox.daemon import require_image
from sandbox.errors import SandboxError
from sandbox.execution import ExecLimits
from sandbox.executor import FIND_EXECUTOR
from sandbox.hardening import audit, capability_mask
from sandbox.runtime import RuntimeChoice
from sandbox.toolbox import ToolBox
from sandbox.workspace import repo_files

# Each line: NAME=VALUE, judged on the host below. no_new_privs is asked of
# prctl (PR_GET_NO_NEW_PRIVS), not read from /proc: gVisor's status file lacks it.
_PROBE = r"""
echo "uid=$(id -u)"
echo "capeff=$(awk '/^CapEff/ {print $2}' /proc/self/status)"
echo "nonewprivs=$(python3 -c 'import ctypes; print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))')"
( : > /etc/escrow-probe ) 2>/dev/null && echo "rootfs=writable" || echo "rootfs=read-only"
( : > /tmp/escrow-probe ) 2>/dev/null && echo "tmp=writable" || echo "tmp=read-only"
echo "netdevs=$(awk -F: 'NR > 2 {gsub(/ /, "", $1); printf "%s ", $1}' /proc/net/dev)"
python3 -c "import socket; socket.create_connection(('192.0.2.1', 80), 2)" 2>/dev/null \
  && echo "egress=open" || echo "egress=blocked"
echo "env=$(env | cut -d= -f1 | sort | tr '\n' ' ')"
echo "kernel=$(dmesg 2>/dev/null | grep -q 'Starting gVisor' && echo gVisor || echo "host $(uname -r)")"
"""
_EXPECT = {
    "uid": lambda v: v.isdigit() and v != "0",
    "capeff": lambda v: set(v) == {"0"},
    "nonewprivs": lambda v: v == "1",
    "rootfs": lambda v: v == "read-only",
    "tmp": lambda v: v == "writable",
    "netdevs": lambda v: v.split() == ["lo"],
    "egress": lambda v: v == "blocked",
    "env": lambda v: set(v.split()) <= {"HOME", "LANG", "PATH", "PWD", "PYTHONDONTWRITEBYTECODE", "SHLVL", "_"},
}


class Check(Frozen):
    name: str
    ok: bool
    detail: str


class DoctorReport(Frozen):
    ok: bool
    checks: tuple[Check, ...]


def run_doctor(client: docker.DockerClient, image: str, runtime: RuntimeChoice) -> DoctorReport:
    checks = [Check(name="daemon", ok=True, detail=f"Docker {client.version().get('Version', '?')} reachable"),
              Check(name="runtime", ok=True, detail=f"{runtime.name} ({runtime.why})")]
    try:
        image_id = require_image(client, image)
        checks.append(Check(name="image", ok=True, detail=f"{image} present ({image_id[:19]})"))
    except SandboxError as exc:
        checks.append(Check(name="image", ok=False, detail=exc.message))
        return DoctorReport(ok=False, checks=tuple(checks))
    with tempfile.TemporaryDirectory(prefix="escrow-doctor-") as empty_repo:
        with Sandbox.start(
            client, image, default_policy(), Path(empty_repo), run_id=f"doctor-{uuid.uuid4().hex[:12]}",
            runtime=runtime.name,
        ) as sandbox:
            for finding in audit(sandbox.inspect(), sandbox.spec, sandbox.run_id):
                checks.append(
                    Check(
                        name=f"inspect {finding.field}",
                        ok=finding.ok,
                        detail=f"{finding.actual}" + ("" if finding.ok else f" (expected {finding.expected})"),
                    )
                )
            probe = sandbox.bash(_PROBE, ExecLimits(timeout_s=20, stdout_cap=8192, stderr_cap=2048))
            values = dict(line.split("=", 1) for line in probe.stdout.text().splitlines() if "=" in line)
            for name, judge in _EXPECT.items():
                value = values.get(name, "<missing>")
                checks.append(Check(name=f"inside {name}", ok=judge(value), detail=value))
            kernel = values.get("kernel", "<missing>")
            # dmesg is gVisor's own under runsc: the proof, from inside, that
            # the sandbox's syscalls meet gVisor rather than the host kernel.
            checks.append(Check(name="inside kernel", ok=(kernel == "gVisor") == (runtime.name == "runsc"),
                                detail=kernel))
            slow = sandbox.bash("sleep 30", ExecLimits(timeout_s=1, stdout_cap=256, stderr_cap=256))
            checks.append(Check(name="inside timeout", ok=slow.timed_out and slow.duration_s < 10,
                                detail=f"sleep 30 under a 1s timeout stopped after {slow.duration_s:.1f}s"))
            checks += exit_checks(sandbox)
            checks.extend(_executor_checks(sandbox))
            checks.extend(_process_checks(sandbox))
            checks.append(_acl_resolution_check(sandbox))
    return DoctorReport(ok=all(c.ok for c in checks), checks=tuple(checks))


def exit_checks(sandbox: Sandbox) -> list[Check]:
    """The exit: a hard link to a symlink at a host file leaves it untouched,
    attributes do not turn a diff binary, the verifier's container is fresh,
    and host git runs nothing from a repo's config."""
    limits = ExecLimits(timeout_s=20, stdout_cap=2048, stderr_cap=2048)
    with tempfile.TemporaryDirectory(prefix="escrow-doctor-host-") as tmp:
        host = Path(tmp) / "canary"
        host.write_text("canary\n")
        os.chmod(host, 0o600)
        os.utime(host, (1_000_000, 1_000_000))
        before = os.stat(host)
        sandbox.bash(f"ln -s {host} s && ln s h && touch -h -d @86400 s && printf '* binary\\n' > .gitattributes "
                     "&& printf 'plain\\n' > probe.txt && echo m > /tmp/escrow-model-marker", limits)
        patch = sandbox.patch()
        after = os.stat(host)
        untouched = (after.st_mode, after.st_mtime, host.read_text()) == (before.st_mode, before.st_mtime, "canary\n")
        repo = Path(tmp) / "repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)
        with open(repo / ".git" / "config", "a") as fh:
            fh.write(f"[core]\n\tfsmonitor = \"touch {tmp}/fsmonitor-ran; false #\"\n")
        repo_files(repo)
        fsmonitor_ran = (Path(tmp) / "fsmonitor-ran").exists()
    with sandbox.fresh(sandbox.starting.archive_of(patch), "doctor") as verifier:
        leftover = verifier.bash("ls -A /tmp", limits).stdout.text()
    skipped = {s.path for s in patch.skipped}
    return [
        Check(
            name="exit export",
            ok=untouched and {"s", "h"} <= skipped,
            detail="hard link to a symlink at a host file: host file " + ("untouched" if untouched else "CHANGED"),
        ),
        Check(
            name="exit diff",
            ok="+plain" in patch.text and "GIT binary patch" not in patch.text,
            detail="'* binary' in .gitattributes: the diff stays text",
        ),
        Check(
            name="exit verifier",
            ok="escrow-model-marker" not in leftover,
            detail="the verifier's container "
            + ("shares /tmp with the model's" if "escrow-model-marker" in leftover else "starts fresh"),
        ),
        Check(
            name="exit host git",
            ok=not fsmonitor_ran,
            detail="core.fsmonitor in a repo's config " + ("RAN on the host" if fsmonitor_ran else "runs nothing"),
        ),
    ]


# From a command. Under gVisor the command's PID namespace holds only its
# own processes, where the executor's number may name one of them: so the
# probe first finds the executor by its argv, and attacks it only there.
_EXECUTOR_PROBE = r"""
echo "executor_seen=$(echo $seen)"
if [ "$seen" = "{pid}" ]; then
p={pid}
kill -9 $p 2>/dev/null && echo "executor_kill=delivered" || echo "executor_kill=refused"
python3 -c "import ctypes; r = ctypes.CDLL(None).ptrace(16, $p, 0, 0)
print('executor_ptrace=' + ('refused' if r else 'attached'))"
ls /proc/$p/fd >/dev/null 2>&1 && echo "executor_fds=listed" || echo "executor_fds=refused"
head -c1 /proc/$p/mem >/dev/null 2>&1 && echo "executor_mem=read" || echo "executor_mem=refused"
head -c1 /proc/$p/environ >/dev/null 2>&1 && echo "executor_environ=read" || echo "executor_environ=refused"
head -c1 /proc/$p/maps >/dev/null 2>&1 && echo "executor_maps=read" || echo "executor_maps=refused"
elif [ -z "$seen" ]; then
for name in kill ptrace fds mem environ maps; do echo "executor_$name=hidden"; done
fi
echo "command_fds=$(ls /proc/self/fd | sort -n | tr '
' ' ')"
echo "command_caps=$(awk '/^Cap/ {{printf "%s ", $2}}' /proc/self/status)"
"""
_HELD_OFF = ("refused", "hidden")


def _executor_checks(sandbox: Sandbox) -> list[Check]:
    """The executor is root with its capabilities only, and a command
    (uid 1000, no capability) can neither signal, trace nor read it."""
    limits = ExecLimits(timeout_s=20, stdout_cap=4096, stderr_cap=1024)
    pid = sandbox.channel.pid
    probe = sandbox.bash(f"seen=$({FIND_EXECUTOR})" + _EXECUTOR_PROBE.format(pid=pid), limits)
    values = dict(line.split("=", 1) for line in probe.stdout.text().splitlines() if "=" in line)
    after = sandbox.bash("echo alive", limits).stdout.text() == "alive\n"
    # Its identity as root sees it, from outside the commands' namespaces.
    _, shown = sandbox.container.exec_run(
        ["awk", '/^(Uid|CapEff|CapBnd):/ {printf "%s%s ", $1, $2}', f"/proc/{pid}/status"], user="0:0")
    status = shown.decode(errors="replace") or "<missing>"
    proc = tuple(values.get(f"executor_{name}") for name in ("fds", "mem", "environ", "maps"))
    held = capability_mask(sandbox.spec.start_capabilities)
    expected_status = f"Uid:0 CapEff:{held} CapBnd:{held} "
    fds = values.get("command_fds", "").split()
    return [
        Check(name="executor identity", ok=status == expected_status,
              detail=f"pid {pid}: {status.strip()}"),
        Check(name="executor signals", ok=values.get("executor_kill") in _HELD_OFF and after,
              detail=f"kill -9 from a command: {values.get('executor_kill')}; executor "
              + ("answers" if after else "GONE")),
        Check(name="executor ptrace", ok=values.get("executor_ptrace") in _HELD_OFF,
              detail=f"PTRACE_ATTACH from a command: {values.get('executor_ptrace')}"),
        Check(name="executor /proc", ok=all(found in _HELD_OFF for found in proc),
              detail="fd dir, mem, environ, maps from a command: " + " ".join(map(str, proc))),
        Check(name="command descriptors", ok=set(fds) <= {"0", "1", "2", "3"},
              detail=f"open in a command: {' '.join(fds) or '<missing>'} (its own listing is 3)"),
        # gVisor's status file has no CapAmb line: four sets there, five under runc.
        Check(name="command capabilities",
              ok=(caps := values.get("command_caps", "").split()) in (["0" * 16] * 5, ["0" * 16] * 4),
              detail="Inh Prm Eff Bnd Amb "[:4 * len(caps)] + ("all empty" if set(caps) == {"0" * 16}
                                                              else " ".join(caps))),
    ]


_ESCAPE = ("(setsid bash -c '(sleep 300 &)' </dev/null >/dev/null 2>&1 &); "
           "nohup setsid sleep 301 </dev/null >/dev/null 2>&1 & kill -9 $(ps -o ppid= -p $PPID) $PPID")


def _process_checks(sandbox: Sandbox) -> list[Check]:
    """Nothing outlives its command: a setsid double fork and a killed
    wrapper leave no process; the model cannot stop the container."""
    limits = ExecLimits(timeout_s=5, stdout_cap=256, stderr_cap=256)
    sandbox.bash(_ESCAPE, limits)
    code, out = sandbox.container.exec_run(["ps", "-eo", "pid=,args="], user=sandbox.spec.user)
    left = [line.strip() for line in out.decode(errors="replace").splitlines() if "sleep 30" in line]
    sandbox.bash("kill -9 -1; kill -9 1", limits)
    running = bool(sandbox.inspect().get("State", {}).get("Running"))
    return [
        Check(name="inside no survivors", ok=code == 0 and not left,
              detail="setsid double fork and killed wrapper: " + (", ".join(left) or "nothing left")),
        Check(name="inside main process", ok=running, detail="kill -9 -1 from a command: container "
              + ("still running" if running else "stopped")),
    ]


def _acl_resolution_check(sandbox: Sandbox) -> Check:
    """The ACL judges the path a symlink resolves to: ``g -> .git``."""
    policy = default_policy()
    sandbox.bash("ln -sfn .git g", ExecLimits(timeout_s=5, stdout_cap=256, stderr_cap=256))
    result = ToolBox(sandbox, policy).execute("read_file", ReadFileArgs(path="g/config"))
    ok = not result.ok and (result.resolved_rule or "").startswith("paths.deny")
    return Check(name="acl resolved paths", ok=ok,
                 detail=f"read_file g/config with g -> .git: {result.resolved_rule or result.observation[:80]}")
