"""Per-operation cost of the sandbox, measured side by side in one run.

Paths, for each operation (``true``, read_file, write_file, edit_file,
list_files):

  docker exec (CLI)        ``docker exec -u 1000 CONTAINER true``: the bare baseline
  docker-py exec_run       the SDK's exec in the same running container
  docker-exec path         the path before the executor: one exec with the
                           timeout/reaper wrapper, then the host's reaper exec;
                           a file tool paid a resolve exec and an op exec, each
                           reaped (the fileop script read from git history)
  executor                 escrow's path now: one request on the container's
                           attached stdio (ToolBox.execute for file tools)

Then host CPU seconds per call (dockerd, containerd and the shims, with
their waited children, and this process) for the docker-exec path against
the executor.

Usage: .venv/bin/python bench/bench_sandbox.py [--n 30] [--image TAG]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from orchestrator.settings import DEFAULT_SANDBOX_IMAGE
from orchestrator.toolset import BashArgs, EditFileArgs, ListFilesArgs, ReadFileArgs, ToolArgs, WriteFileArgs
from policies import default_policy
from sandbox import ExecLimits, Sandbox, ToolBox, connect
from sandbox.hardening import SANDBOX_ENV, WORKSPACE

# The last commit whose file tools ran as docker execs of this script.
DOCKER_EXEC_REF = "d030d22"
_WRAPPER = 't=$1; shift; /usr/bin/timeout --kill-after=1 "$t" "$@"; rc=$?; kill -9 -1 2>/dev/null; exit $rc'
_REAP = "kill -9 -1 2>/dev/null; exit 0"


def timed(fn: Callable[[], object], n: int) -> list[float]:
    fn()  # warm-up, not counted
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


class DockerExecPath:
    """The docker-exec path as it was: the same API calls per command."""

    def __init__(self, sandbox: Sandbox, fileop_script: str | None) -> None:
        self.api = sandbox.client.api
        self.id = sandbox.container.id
        self.user = sandbox.spec.user
        self.fileop_script = fileop_script

    def command(self, argv: list[str], stdin: bytes | None = None) -> bytes:
        env = [f"{k}={v}" for k, v in sorted(SANDBOX_ENV.items())]
        wrapped = ["/usr/bin/env", "-i", *env, "/bin/bash", "-c", _WRAPPER, "escrow-exec", "30s", *argv]
        exec_id = self.api.exec_create(self.id, wrapped, stdin=stdin is not None, user=self.user,
                                       workdir=WORKSPACE)["Id"]
        if stdin is None:
            out = self.api.exec_start(exec_id)
        else:
            # docker-py's socket wrapper: its raw socket, for a half-close after stdin.
            sock = self.api.exec_start(exec_id, socket=True)._sock  # type: ignore[union-attr]
            sock.sendall(stdin)
            sock.shutdown(1)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
            sock.close()
            out = b"".join(chunks)
        self.api.exec_inspect(exec_id)
        self.reap()
        return out

    def reap(self) -> None:
        exec_id = self.api.exec_create(self.id, ["/bin/bash", "-c", _REAP], user=self.user)["Id"]
        self.api.exec_start(exec_id, detach=True)
        while self.api.exec_inspect(exec_id).get("Running"):
            time.sleep(0.01)

    def file_op(self, request: dict) -> bytes:
        assert self.fileop_script is not None
        script = ["/usr/bin/python3", "-I", "-S", "-c", self.fileop_script]
        self.command(script, json.dumps({"op": "resolve", "path": request["path"]}).encode())
        return self.command(script, json.dumps({**request, "resolved": True, "max_bytes": 65536}).encode())


def old_fileop_script() -> str | None:
    proc = subprocess.run(["git", "show", f"{DOCKER_EXEC_REF}:sandbox/fileop_script.py"], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parents[1], check=False)
    return proc.stdout if proc.returncode == 0 else None


_DAEMONS = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2")


def daemon_cpu_s() -> float:
    """utime+stime (and waited children's) of dockerd, containerd and every shim."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                raw = fh.read()
        except OSError:
            continue
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        if name in _DAEMONS:
            fields = raw[raw.rindex(")") + 2 :].split()
            total += sum(int(f) for f in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_per_call(fn: Callable[[], object], n: int) -> tuple[float, float]:
    fn()
    daemons, own = daemon_cpu_s(), own_cpu_s()
    for _ in range(n):
        fn()
    return (daemon_cpu_s() - daemons) / n, (own_cpu_s() - own) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--image", default=DEFAULT_SANDBOX_IMAGE)
    opts = parser.parse_args()
    client = connect()
    policy = default_policy()
    limits = ExecLimits(timeout_s=30, stdout_cap=4096, stderr_cap=4096)
    script = old_fileop_script()
    rows: dict[str, dict[str, list[float]]] = {}
    cpu: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as repo:
        Path(repo, "f.txt").write_text("x\n" * 50)
        Path(repo, "d").mkdir()
        with Sandbox.start(client, opts.image, policy, Path(repo)) as sandbox:
            box = ToolBox(sandbox, policy)
            old = DockerExecPath(sandbox, script)
            cid, user = sandbox.container.id, sandbox.spec.user
            ops: dict[str, dict[str, Callable[[], object]]] = {
                "true": {
                    "docker exec (CLI)": lambda: subprocess.run(["docker", "exec", "-u", user, cid, "true"],
                                                                check=True),
                    "docker-py exec_run": lambda: sandbox.container.exec_run(["true"], user=user),
                    "docker-exec path": lambda: old.command(["true"]),
                    "executor": lambda: box.execute("bash", BashArgs(command="true")),
                },
            }
            file_ops: dict[str, tuple[ToolArgs, dict[str, object]]] = {
                "read_file": (ReadFileArgs(path="f.txt"), {"op": "read", "path": "f.txt", "start_line": 1,
                                                           "max_lines": None}),
                "write_file": (WriteFileArgs(path="d/w.txt", content="y\n"),
                               {"op": "write", "path": "d/w.txt", "content": "y\n"}),
                "edit_file": (EditFileArgs(path="f.txt", old="x\n" * 50, new="x\n" * 50),
                              {"op": "edit", "path": "f.txt", "old": "x\n" * 50, "new": "x\n" * 50}),
                "list_files": (ListFilesArgs(path="."), {"op": "list", "path": ".", "depth": 2, "max_entries": 500}),
            }
            for name, (args, request) in file_ops.items():
                paths: dict[str, Callable[[], object]] = {"executor": partial(box.execute, args.name, args)}
                if script is not None:
                    paths = {"docker-exec path": partial(old.file_op, request), **paths}
                ops[name] = paths
            for op, paths in ops.items():
                rows[op] = {path: timed(fn, opts.n) for path, fn in paths.items()}
            cpu["docker-exec path"] = cpu_per_call(lambda: old.command(["true"]), opts.n)
            cpu["executor"] = cpu_per_call(lambda: sandbox.bash("true", limits), opts.n)
    bare = statistics.median(rows["true"]["docker exec (CLI)"])
    print(f"{'operation':11} {'path':19} {'n':>3} {'median ms':>10} {'p90 ms':>7} {'x docker exec':>14}")
    for op, timings in rows.items():
        for path, samples in timings.items():
            med = statistics.median(samples)
            p90 = sorted(samples)[int(0.9 * (len(samples) - 1))]
            print(f"{op:11} {path:19} {len(samples):>3} {med * 1e3:>10.2f} {p90 * 1e3:>7.2f} {med / bare:>14.3f}")
    if script is None:
        print(f"(the docker-exec path's file tools need git history back to {DOCKER_EXEC_REF}; not measured)")
    print()
    print(f"{'host CPU per command (true)':29} {'daemons ms':>11} {'this process ms':>16}")
    for path, (daemons, own) in cpu.items():
        print(f"{path:29} {daemons * 1e3:>11.2f} {own * 1e3:>16.2f}")
    old_d, new_d = cpu["docker-exec path"][0], cpu["executor"][0]
    print(f"daemon CPU, executor / docker-exec path: {new_d / old_d if old_d else float('nan'):.3f}")


if __name__ == "__main__":
    main()
