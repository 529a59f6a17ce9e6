"""runsc (gVisor) against runc, measured side by side in one run.

For each runtime, interleaved round by round so that machine noise falls on
both: a sandbox's start and close (create, start, hello, repo copied in), one
command (``true`` through the executor), one file operation (read_file), the
example repo's pytest, and a verification (the patch exported, a fresh
container filled with it, the verifier run there). Prints the median of each
and the ratio runsc/runc.

Then whole runs, through the real loop against the fault server replying at
once (an instant model): the example tasks as a batch on 2 workers (each
task reads its file --explore-turns times, then writes its fix and submits),
once per runtime. Printed: the batch's wall time, and a whole turn, the
median over the runs of (run end - sandbox up) / turns, so the sandbox start
is in the batch row and the verification (its fresh container and the
verifier) in the turn; then where a run's time goes: its tool calls, its
verifier command, and the rest (the verifier's container, the patch's
export, the orchestrator's own work).

Usage: .venv/bin/python bench/bench_runtime.py [--n 10] [--tasks 13] [--image TAG]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.settings import DEFAULT_SANDBOX_IMAGE
from orchestrator.toolset import ReadFileArgs
from policies import default_policy
from sandbox import ExecLimits, Sandbox, ToolBox, connect

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_batch import one_pool, paced_scripts  # noqa: E402  (one batch harness for both benches)

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "calculator"
RUNTIMES = ("runc", "runsc")
LIMITS = ExecLimits(timeout_s=120, stdout_cap=65536, stderr_cap=65536)


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(sandbox: Sandbox) -> dict[str, float]:
    """One command, one file operation, the example's pytest and a verification, in ``sandbox``."""
    policy = default_policy()
    box = ToolBox(sandbox, policy, verifier_command="python3 -m pytest -q")

    def verify() -> None:
        with sandbox.fresh(sandbox.archive_of(sandbox.patch()), "bench") as fresh:
            fresh.bash("python3 -m pytest -q", LIMITS)

    return {
        "command": statistics.median(seconds(lambda: sandbox.bash("true", LIMITS)) for _ in range(5)),
        "file op": statistics.median(
            seconds(lambda: box.execute("read_file", ReadFileArgs(path="calc.py"))) for _ in range(5)),
        "pytest": seconds(lambda: sandbox.bash("python3 -m pytest -q", LIMITS)),
        "verification": seconds(verify),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=10, help="rounds (each runtime once per round)")
    parser.add_argument("--tasks", type=int, default=13, help="example tasks in the batch (0: no batch rows)")
    parser.add_argument("--explore-turns", type=int, default=4, help="reads before each task's fix")
    parser.add_argument("--image", default=DEFAULT_SANDBOX_IMAGE)
    opts = parser.parse_args()
    client, policy = connect(), default_policy()
    samples: dict[tuple[str, str], list[float]] = {}

    def add(runtime: str, name: str, value: float) -> None:
        samples.setdefault((name, runtime), []).append(value)

    for round_ in range(opts.n + 1):  # round 0 warms each runtime up and is not counted
        for runtime in RUNTIMES:
            start = time.perf_counter()
            sandbox = Sandbox.start(client, opts.image, policy, EXAMPLE, runtime=runtime)  # type: ignore[arg-type]
            started = time.perf_counter() - start
            try:
                figures = {"start": started, **measure(sandbox)}
            finally:
                close = seconds(sandbox.close)
            figures["start"] += close
            if round_:
                for name, value in figures.items():
                    add(runtime, name, value)
    print(f"{'median s (' + str(opts.n) + ' rounds)':<28}{'runc':>10}{'runsc':>10}{'runsc/runc':>12}")
    for name in ("start", "command", "file op", "pytest", "verification"):
        runc, runsc = (statistics.median(samples[(name, r)]) for r in RUNTIMES)
        label = "start + close" if name == "start" else name
        print(f"{label:<28}{runc:>10.3f}{runsc:>10.3f}{runsc / runc:>11.2f}x")
    if opts.tasks:
        batch_rows(opts.tasks, opts.explore_turns, opts.image)


def batch_rows(tasks: int, explore: int, image: str) -> None:
    """The example tasks on 2 workers under each runtime, an instant model."""
    scripts = paced_scripts(tokens_per_s=1e9, ttft_s=0.0, reasoning_tokens=0, explore=explore)
    walls: dict[str, float] = {}
    phases: dict[str, dict[str, float]] = {}
    passed: dict[str, int] = {}
    for runtime in RUNTIMES:
        wall, results, phases[runtime] = one_pool(2, tasks, scripts, image, runtime)
        walls[runtime] = wall
        passed[runtime] = sum(r.verdict == "PASS" for r in results)
    # Where a run's time goes (bench_batch.timeline's phases): the turn is
    # (run end - sandbox up) / model calls, so its verification is in it.
    for name, label in (("turn", "whole turn (median of runs)"), ("tools", "  a run's tool calls"),
                        ("verify", "  a run's verifier command"), ("rest", "  a run's other work")):
        runc, runsc = phases["runc"][name], phases["runsc"][name]
        print(f"{label:<28}{runc:>10.3f}{runsc:>10.3f}{runsc / runc:>11.2f}x")
    label = f"{tasks}-task batch, 2 workers"
    print(f"{label:<28}{walls['runc']:>10.1f}{walls['runsc']:>10.1f}{walls['runsc'] / walls['runc']:>11.2f}x")
    print(f"passed: runc {passed['runc']}/{tasks}, runsc {passed['runsc']}/{tasks}")


if __name__ == "__main__":
    main()
