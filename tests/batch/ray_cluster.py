"""A real two-node Ray cluster on this machine, for the Ray executor's tests
and bench: ``ray start --head`` and a second ``ray start --address``, each
node with its own temporary directory and its own ports, so that stopping
it (or killing its worker node) touches no other cluster on the machine."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = Path(sys.executable).parent / "ray"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ports_free(first: int, count: int) -> bool:
    for port in range(first, first + count):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def worker_port_block(count: int = 40, *, avoid: set[int] | frozenset[int] = frozenset()) -> tuple[int, int]:
    """A block of free ports for one node's worker processes, holding none of
    ``avoid`` (ports chosen for the cluster but not bound yet)."""
    for _ in range(50):
        first = random.randrange(30000, 45000)
        if not avoid & set(range(first, first + count)) and _ports_free(first, count):
            return first, first + count - 1
    raise RuntimeError("no free block of ports for Ray workers")


def free_ports(count: int, *, avoid: set[int]) -> list[int]:
    """``count`` distinct free ports, none of them in ``avoid``. The kernel's
    ephemeral range overlaps the worker block, and ``ray start`` refuses a
    port that two of its components share."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in avoid and port not in ports:
            ports.append(port)
    return ports


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process on the machine."""
    out: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out[int(entry)] = (ppid, cmdline)
    return out


def node_processes(temp_dir: Path) -> set[int]:
    """The processes of the node whose temporary directory is ``temp_dir``:
    those naming it on their command line, and all their descendants."""
    procs = processes()
    marker = str(temp_dir)
    found = {pid for pid, (_, cmd) in procs.items() if marker in cmd and pid != os.getpid()}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in procs.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    return found


def kill_all(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class RayCluster:
    """Head and worker node; ``address`` is what ``--address`` takes."""

    def __init__(self, *, head_cpus: int = 2, worker_cpus: int = 2, head_env: dict[str, str] | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="escrow-ray-", dir="/tmp"))
        self.head_dir, self.worker_dir = self.root / "head", self.root / "worker"
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.head_cpus, self.worker_cpus = head_cpus, worker_cpus
        self.head_env = head_env or {}

    def _start(self, temp_dir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        low, high = worker_port_block(avoid={self.port})
        node_manager, object_manager, agent, agent_grpc, runtime_env, metrics, dashboard = free_ports(
            7, avoid={self.port, *range(low, high + 1)})
        head = ("--include-dashboard", "false", "--dashboard-port", str(dashboard)) if "--head" in args else ()
        command = [
            str(RAY), "start", *args, *head, "--node-ip-address", "127.0.0.1", "--temp-dir", str(temp_dir),
            "--object-store-memory", str(80 * 1024 * 1024), "--disable-usage-stats",
            "--node-manager-port", str(node_manager), "--object-manager-port", str(object_manager),
            "--min-worker-port", str(low), "--max-worker-port", str(high),
            "--dashboard-agent-listen-port", str(agent), "--dashboard-agent-grpc-port", str(agent_grpc),
            "--runtime-env-agent-port", str(runtime_env), "--metrics-export-port", str(metrics),
        ]
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env or {})}
        for _ in range(3):  # Ray gives a raylet 30 s to register: a loaded machine may need another go
            done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
            if done.returncode == 0:
                return
            kill_all(node_processes(temp_dir))
            if "timed out during startup" not in done.stderr:
                break
        raise RuntimeError(f"ray start failed ({done.returncode}): {done.stderr[-2000:]}")

    def start(self) -> RayCluster:
        try:
            self._start(self.head_dir, "--head", "--port", str(self.port), "--num-cpus", str(self.head_cpus),
                        env=self.head_env)
            self._start(self.worker_dir, "--address", self.address, "--num-cpus", str(self.worker_cpus))
            self.wait_for_nodes(2)
        except BaseException:
            self.stop()
            raise
        return self

    def alive_nodes(self) -> int:
        probe = ("import ray; ray.init(address=%r, logging_level='ERROR', log_to_driver=False); "
                 "print('alive', sum(n['Alive'] for n in ray.nodes()))" % self.address)
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
        # Ray may print cluster events on stdout too (a node marked dead).
        counts = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("alive ")]
        return int(counts[-1]) if done.returncode == 0 and counts else -1

    def wait_for_nodes(self, count: int, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while (alive := self.alive_nodes()) != count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Ray cluster has {alive} live nodes, not {count}")
            time.sleep(1.0)

    def worker_pids(self) -> set[int]:
        """The worker node's process tree: its raylet, agents and task workers."""
        return node_processes(self.worker_dir)

    def kill_worker_node(self) -> set[int]:
        """kill -9 of the worker node's whole process tree (a node lost)."""
        pids = self.worker_pids()
        kill_all(pids)
        return pids

    def ensure_worker(self) -> None:
        """A worker node again after a test killed it (in a fresh directory)."""
        if self.worker_pids():
            return
        self.worker_dir = self.root / f"worker{len(list(self.root.glob('worker*')))}"
        self._start(self.worker_dir, "--address", self.address, "--num-cpus", str(self.worker_cpus))
        self.wait_for_nodes(2)

    def stop(self) -> None:
        """Ends this cluster's processes only (``ray stop`` would end every
        cluster on the machine), then removes its directories."""
        for _ in range(3):
            pids = node_processes(self.root)
            if not pids:
                break
            kill_all(pids)
            time.sleep(0.5)
        shutil.rmtree(self.root, ignore_errors=True)

    def head_pids(self) -> set[int]:
        return node_processes(self.head_dir)

    def worker_raylet(self) -> int:
        """The worker node's raylet process."""
        procs = processes()
        (pid,) = {p for p in self.worker_pids() if "/raylet/raylet " in procs.get(p, (0, ""))[1] + " "}
        return pid
