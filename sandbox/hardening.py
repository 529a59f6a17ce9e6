"""The container's hardening, as data: one spec turns into docker-py create
arguments, and the same spec audits a ``docker inspect`` result field by
field (used by ``escrow sandbox doctor`` and by the tests)."""

from __future__ import annotations

import hashlib
from typing import Any

from orchestrator.contract import Frozen
from policies import Policy
from sandbox.executor import COMMAND as EXECUTOR_COMMAND
from sandbox.runtime import RuntimeName

LABEL_ROLE = "escrow.sandbox"
LABEL_RUN = "escrow.run_id"
LABEL_PID = "escrow.owner_pid"
LABEL_PID_START = "escrow.owner_start"
LABEL_HOST = "escrow.owner_host"
WORKSPACE = "/workspace"
SANDBOX_UID_GID = "1000:1000"
# The container's init and main process (the executor) run as root with only
# the executor's capabilities (sandbox.executor.CAPABILITIES): the sandbox
# user, another uid without any capability, can neither signal, trace nor
# read them, and the executor's kill(-1) ends every other process at once.
MAIN_USER = "0:0"
# What the executor holds, and nothing more: KILL for kill(-1), SETUID and
# SETGID to become the sandbox user in each child, SETPCAP to empty that
# child's bounding set first.
EXECUTOR_CAPABILITIES = ("KILL", "SETGID", "SETPCAP", "SETUID")
# Each capability's bit in /proc/PID/status's masks (linux/capability.h).
CAPABILITY_BITS = {"KILL": 5, "SETGID": 6, "SETUID": 7, "SETPCAP": 8, "SYS_ADMIN": 21}


def capability_mask(capabilities: tuple[str, ...]) -> str:
    """``/proc/PID/status``'s hex for exactly these capabilities."""
    return f"{sum(1 << CAPABILITY_BITS[name] for name in capabilities):016x}"

# Under gVisor the executor also holds SYS_ADMIN (gVisor's own, inside the
# sandbox's kernel, not the host's), to give each child a PID namespace and
# /proc of its own; a child gives it up with the rest before it runs
# anything (sandbox/command_namespace.py says why).
RUNSC_EXECUTOR_CAPABILITIES = ("SYS_ADMIN",)
# Under gVisor the container's pids cgroup counts the sandbox kernel's host
# tasks, not the guest's processes: on the ptrace platform a guest process
# costs up to about 18 host tasks (measured under runsc 0.0~20240729: a bash
# fork bomb held to 128 processes peaked at 1,500 to 2,260, and past 16 a
# process the sandbox's kernel panicked, "error initializing first thread:
# resource temporarily unavailable"), so a cgroup sized for the guest kills
# the whole sandbox when its kernel cannot start one. There the guest's
# limit is RLIMIT_NPROC, which gVisor's kernel enforces for the sandbox user,
# and the cgroup bounds the sandbox as a whole. Under runc RLIMIT_NPROC would
# count every process of uid 1000 on the host, across sandboxes: the cgroup
# is the guest's limit there.
RUNSC_HOST_TASKS_PER_PROCESS = 32
RUNSC_HOST_TASKS_BASE = 128
# Memory under gVisor: the cgroup holds the sandbox's kernel too, and a
# guest over it would end the whole sandbox (the host's OOM killer takes the
# kernel; gVisor has no OOM killer of its own). So each command is held to
# the policy's memory by RLIMIT_AS (gVisor enforces it; not RLIMIT_DATA), and
# the cgroup adds the kernel's share: a python3 fork bomb held to 128
# processes peaked at about 400 MiB of cgroup memory (3 MiB a process).
RUNSC_HOST_MEMORY_PER_PROCESS = 4 * 2**20
RUNSC_HOST_MEMORY_BASE = 128 * 2**20
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1"}


class Hardening(Frozen):
    image: str
    runtime: RuntimeName = "runc"
    user: str = SANDBOX_UID_GID
    main_user: str = MAIN_USER
    network: bool = False
    memory_bytes: int = 1024 * 2**20
    nano_cpus: int = 1_000_000_000
    pids: int = 256
    tmp_bytes: int = 64 * 2**20
    workspace_bytes: int = 512 * 2**20
    workspace_files: int = 50_000
    nofile: int = 1024

    command: tuple[str, ...] = tuple(EXECUTOR_COMMAND)
    capabilities: tuple[str, ...] = EXECUTOR_CAPABILITIES

    @classmethod
    def from_policy(cls, image: str, policy: Policy, runtime: RuntimeName = "runc") -> "Hardening":
        r = policy.resources
        return cls(
            image=image, runtime=runtime, network=policy.network.enabled, memory_bytes=r.memory_mb * 2**20,
            nano_cpus=int(r.cpus * 1e9), pids=r.pids, tmp_bytes=r.tmp_mb * 2**20,
            workspace_bytes=r.workspace_mb * 2**20, workspace_files=r.workspace_files,
        )

    @property
    def under_gvisor(self) -> bool:
        """The limits below differ under runsc (see RUNSC_HOST_TASKS_PER_PROCESS)."""
        return self.runtime == "runsc"

    @property
    def host_pids(self) -> int:
        """The container's pids cgroup limit."""
        return self.pids * RUNSC_HOST_TASKS_PER_PROCESS + RUNSC_HOST_TASKS_BASE if self.under_gvisor else self.pids

    @property
    def host_memory_bytes(self) -> int:
        """The container's memory cgroup limit."""
        if self.under_gvisor:
            return self.memory_bytes + self.pids * RUNSC_HOST_MEMORY_PER_PROCESS + RUNSC_HOST_MEMORY_BASE
        return self.memory_bytes

    @property
    def main_command(self) -> list[str]:
        """The executor and its arguments: the memory it holds each command and
        the guest to, whether each child gets a PID namespace, and the
        processes at which it kills a command; under runc none of them (the
        cgroups hold the guest, and Linux already refuses a command the
        executor's /proc entries)."""
        if self.under_gvisor:
            return [*self.command, str(self.memory_bytes), "pidns", str(self.pids)]
        return [*self.command, "0", "-", "0"]

    @property
    def start_capabilities(self) -> tuple[str, ...]:
        """The capabilities the container's init and the executor hold."""
        return (*self.capabilities, *(RUNSC_EXECUTOR_CAPABILITIES if self.under_gvisor else ()))

    @property
    def ulimits(self) -> list[dict[str, Any]]:
        limits = [{"Name": "nofile", "Soft": self.nofile, "Hard": self.nofile}, {"Name": "core", "Soft": 0, "Hard": 0}]
        if self.under_gvisor:
            limits.append({"Name": "nproc", "Soft": self.pids, "Hard": self.pids})
        return limits

    @property
    def tmpfs(self) -> dict[str, str]:
        uid, _, gid = self.user.partition(":")
        return {
            "/tmp": f"rw,nosuid,nodev,noexec,size={self.tmp_bytes},mode=1777",
            WORKSPACE: f"rw,nosuid,nodev,exec,size={self.workspace_bytes},uid={uid},gid={gid},mode=0755",
        }

    def create_kwargs(self, labels: dict[str, str]) -> dict[str, Any]:
        """Arguments for ``client.containers.create``."""
        return {
            "image": self.image,
            "runtime": self.runtime,
            "command": self.main_command,
            "user": self.main_user,
            "working_dir": WORKSPACE,
            "environment": {},
            "hostname": "sandbox",
            "network_mode": "bridge" if self.network else "none",
            "cap_drop": ["ALL"],
            "cap_add": list(self.start_capabilities),
            "security_opt": ["no-new-privileges"],
            "privileged": False,
            "read_only": True,
            "tmpfs": self.tmpfs,
            "pids_limit": self.host_pids,
            "mem_limit": self.host_memory_bytes,
            "memswap_limit": self.host_memory_bytes,
            "nano_cpus": self.nano_cpus,
            "ulimits": self.ulimits,
            "init": True,
            "ipc_mode": "private",
            "labels": labels,
            # The executor's channel: attached stdin, never logged (its frames
            # carry every command's output and the workspace's export).
            "stdin_open": True,
            "log_config": {"type": "none", "config": {}},
            "detach": True,
        }


class Finding(Frozen):
    field: str
    expected: str
    actual: str
    ok: bool


def audit(inspect: dict[str, Any], spec: Hardening, run_id: str | None = None) -> list[Finding]:
    """Compare a container's ``docker inspect`` with the spec, one field per finding."""
    host, config = inspect.get("HostConfig", {}), inspect.get("Config", {})
    checks: list[tuple[str, Any, Any]] = [
        ("HostConfig.Runtime", spec.runtime, host.get("Runtime")),
        ("HostConfig.NetworkMode", "bridge" if spec.network else "none", host.get("NetworkMode")),
        ("HostConfig.CapDrop", ["ALL"], host.get("CapDrop")),
        ("HostConfig.CapAdd", sorted(f"CAP_{c}" for c in spec.start_capabilities),
         sorted(c if c.startswith("CAP_") else f"CAP_{c}" for c in host.get("CapAdd") or [])),
        ("HostConfig.Privileged", False, host.get("Privileged")),
        ("HostConfig.SecurityOpt", ["no-new-privileges"], host.get("SecurityOpt")),
        ("Config.User", spec.main_user, config.get("User")),
        ("HostConfig.ReadonlyRootfs", True, host.get("ReadonlyRootfs")),
        ("HostConfig.Tmpfs", spec.tmpfs, host.get("Tmpfs")),
        ("HostConfig.PidsLimit", spec.host_pids, host.get("PidsLimit")),
        ("HostConfig.Ulimits", spec.ulimits, host.get("Ulimits")),
        ("HostConfig.Memory", spec.host_memory_bytes, host.get("Memory")),
        ("HostConfig.MemorySwap", spec.host_memory_bytes, host.get("MemorySwap")),
        ("Config.Cmd", spec.main_command, config.get("Cmd")),
        ("HostConfig.NanoCpus", spec.nano_cpus, host.get("NanoCpus")),
        ("HostConfig.Init", True, host.get("Init")),
        ("HostConfig.Binds", None, host.get("Binds") or None),
        ("HostConfig.LogConfig.Type", "none", host.get("LogConfig", {}).get("Type")),
        ("Mounts", [], [m for m in inspect.get("Mounts", []) if m.get("Type") != "tmpfs"]),
        ("Config.Labels." + LABEL_ROLE, "1", config.get("Labels", {}).get(LABEL_ROLE)),
    ]
    if run_id is not None:
        checks.append(("Config.Labels." + LABEL_RUN, run_id, config.get("Labels", {}).get(LABEL_RUN)))
    return [Finding(field=f, expected=_shown(e), actual=_shown(a), ok=e == a) for f, e, a in checks]


def _shown(value: Any) -> str:
    """repr, with a long argument (the executor's script) named by its size
    and digest: a finding stays one readable line."""
    if isinstance(value, list) and any(isinstance(v, str) and len(v) > 200 for v in value):
        value = [f"<{len(v):,} characters, sha256 {hashlib.sha256(v.encode()).hexdigest()[:12]}>"
                 if isinstance(v, str) and len(v) > 200 else v for v in value]
    return repr(value)
