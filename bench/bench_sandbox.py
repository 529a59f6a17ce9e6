"""Per-command overhead of the sandbox, measured side by side in one run:

  local subprocess            subprocess.run(["true"]) on the host
  docker-py exec_run (warm)   bare docker exec in a running container
  exec, no host reap          the same exec without the host's reaper exec afterwards
  Sandbox.exec (warm)         escrow's path: env -i, timeout, reaper, deadline-driven socket,
                              then the host's reaper exec (nothing outlives its command)
  read_file, one exec         the file op alone (no resolution step), reaped
  read_file (ToolBox)         escrow's path: resolve, ACL on the resolved path, then the op
  docker run per command      a fresh hardened container for every command

Usage: .venv/bin/python bench/bench_sandbox.py [--n 30] [--image TAG]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.toolset import ReadFileArgs
from policies import default_policy
from sandbox import ExecLimits, Hardening, Sandbox, ToolBox, connect
from sandbox.execution import run_exec, wrap_command
from sandbox.hardening import SANDBOX_ENV, WORKSPACE


def timed(fn: Callable[[], object], n: int) -> list[float]:
    fn()  # warm-up, not counted
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--image", default="escrow-sandbox:bookworm-1")
    opts = parser.parse_args()
    client = connect()
    policy = default_policy()
    limits = ExecLimits(timeout_s=30, stdout_cap=4096, stderr_cap=4096)
    spec = Hardening.from_policy(opts.image, policy)
    run_kwargs = {k: v for k, v in spec.create_kwargs({"escrow.bench": "1"}).items() if k not in ("detach", "command")}
    results: dict[str, list[float]] = {}
    results["local subprocess"] = timed(lambda: subprocess.run(["true"], check=True), opts.n)
    with tempfile.TemporaryDirectory() as repo:
        Path(repo, "f.txt").write_text("x\n")
        with Sandbox.start(client, opts.image, policy, Path(repo)) as sandbox:
            results["docker-py exec_run (warm)"] = timed(
                lambda: sandbox.container.exec_run(["true"], user=spec.user), opts.n)
            results["exec, no host reap"] = timed(lambda: run_exec(
                client.api, sandbox.container.id, wrap_command(["true"], SANDBOX_ENV, limits.timeout_s),
                user=spec.user, workdir=WORKSPACE, limits=limits), opts.n)
            results["Sandbox.exec (warm)"] = timed(lambda: sandbox.exec(["true"], limits), opts.n)
            box = ToolBox(sandbox, policy)
            results["read_file, one exec"] = timed(lambda: box._fileop(
                {"op": "read", "path": "f.txt", "start_line": 1, "max_lines": None, "max_bytes": 4096}), opts.n)
            results["read_file (ToolBox)"] = timed(lambda: box.execute("read_file", ReadFileArgs(path="f.txt")), opts.n)
    results["docker run per command"] = timed(
        lambda: client.containers.run(command=["true"], remove=True, **run_kwargs), max(opts.n // 3, 5))
    base = statistics.median(results["local subprocess"])
    warm = statistics.median(results["Sandbox.exec (warm)"])
    print(f"{'path':28} {'n':>4} {'median ms':>10} {'p90 ms':>8} {'x subprocess':>13} {'x Sandbox.exec':>15}")
    for name, samples in results.items():
        med = statistics.median(samples)
        p90 = sorted(samples)[int(0.9 * (len(samples) - 1))]
        print(
            f"{name:28} {len(samples):>4} {med * 1e3:>10.2f} {p90 * 1e3:>8.2f} {med / base:>13.1f} {med / warm:>15.2f}"
        )


if __name__ == "__main__":
    main()
