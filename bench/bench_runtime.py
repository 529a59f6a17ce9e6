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

Then ``submit`` (the example's fix written, the first submit of a run: its
pre-pass, the copy, the tests) with the verifier's container started early
(``ToolBox.start_early``, awaited as the model's time would) and without,
and the phase table: where a command and a verification spend their time,
each phase from what the executor records (its ``duration_s``) or from one
step of the sandbox timed alone; a phase that cannot be timed on its own is
named as derived, with how.

Last, ``submit`` on a large repository (``--large`` files of 200 bytes,
then a twelfth as many of 180 KB; one file changed), early verifier on, the
whole copy sent against only what changed (``StartingCopy.refill``,
forced each way), with the files each sent.

Usage: .venv/bin/python bench/bench_runtime.py [--n 10] [--tasks 13] [--large 5000] [--image TAG]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
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
        with sandbox.fresh(sandbox.starting.archive_of(sandbox.patch()), "bench") as fresh:
            fresh.bash("python3 -m pytest -q", LIMITS)

    return {
        **phases(sandbox),
        "command": statistics.median(seconds(lambda: sandbox.bash("true", LIMITS)) for _ in range(5)),
        "file op": statistics.median(
            seconds(lambda: box.execute("read_file", ReadFileArgs(path="calc.py"))) for _ in range(5)),
        "pytest": seconds(lambda: sandbox.bash("python3 -m pytest -q", LIMITS)),
        "verification": seconds(verify),
    }


# In the container, as a command: the median of 20 of os.fork (the child
# exits at once) and of fork + execv /bin/true, each waited for.
_FORK_EXEC = """
import os, statistics, time
def one(run):
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        run()
    os.waitpid(pid, 0)
    return time.perf_counter() - start
fork = statistics.median(one(lambda: os._exit(0)) for _ in range(20))
exec_ = statistics.median(one(lambda: os.execv("/bin/true", ["/bin/true"])) for _ in range(20))
print(fork, exec_)
"""
_EMPTY_TAR = b"\0" * 1024


def phases(sandbox: Sandbox) -> dict[str, float]:
    """The phase table's figures in ``sandbox``: a command's, from the
    executor's own ``duration_s`` and a fork/exec timed in the container;
    a verification's, each step of ``submit`` timed alone."""
    trips, durations = [], []
    for _ in range(5):  # the host's wall and the executor's duration_s of the same command
        start = time.perf_counter()
        outcome = sandbox.bash("true", LIMITS)
        trips.append(time.perf_counter() - start - outcome.duration_s)
        durations.append(outcome.duration_s)
    executor = statistics.median(durations)
    fork, exec_ = (float(x) for x in sandbox.exec(["/usr/bin/python3", "-I", "-S", "-c", _FORK_EXEC],
                                                  LIMITS).stdout.text().split())
    figures = {"ph fork": fork, "ph fork+exec": exec_, "ph executor true": executor,
               "ph child setup": max(executor - exec_, 0.0), "ph round trip": statistics.median(trips)}
    start = time.perf_counter()
    patch = sandbox.patch()
    figures["ph export"] = time.perf_counter() - start
    copy = sandbox.starting.verifier_copy(patch, default_policy(), sandbox.installed_modules)
    start = time.perf_counter()
    with sandbox.fresh(_EMPTY_TAR, "bench") as fresh:
        figures["ph container start"] = time.perf_counter() - start
        figures["ph copy"] = seconds(lambda: fresh.refill(sandbox.starting.archive_for(copy)))
        outcome = fresh.bash("python3 -m pytest -q", LIMITS)
        figures["ph pytest"] = outcome.duration_s
    return figures


def submit_s(sandbox: Sandbox, early: bool, changed_only: bool = True) -> float:
    """One run's first ``submit`` in ``sandbox``, its verifier container
    started early (and ready, as after a model's turn) or not."""
    box = ToolBox(sandbox, default_policy(), verifier_command="python3 -m pytest -q")
    box.copy_changed_only = changed_only
    try:
        if early:
            box.start_early()
            while box._early is not None and not box._early.done:  # the model's time, here waited out
                time.sleep(0.01)
        return seconds(box.submit)
    finally:
        box.close()  # a failed submit starts the next one's container: not this bench's


PHASES = (("ph fork", "  fork (in the container)"), ("ph fork+exec", "  fork + exec of /bin/true"),
          ("ph executor true", "  executor's dur. of true"),
          ("ph child setup", "  namespace + setup (derived)"), ("ph round trip", "  host round trip (derived)"),
          ("ph export", "  export of the workspace"), ("ph container start", "  container start (+1 exec)"),
          ("ph copy", "  copy into it (refill)"), ("ph pytest", "  pytest (executor's dur.)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=10, help="rounds (each runtime once per round)")
    parser.add_argument("--tasks", type=int, default=13, help="example tasks in the batch (0: no batch rows)")
    parser.add_argument("--explore-turns", type=int, default=4, help="reads before each task's fix")
    parser.add_argument("--large", type=int, default=5000, help="files of the large repo (0: no large rows)")
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
                sandbox.bash("sed -i 's/(len(values) + 1)/len(values)/' calc.py", LIMITS)  # the example's fix
                figures = {"start": started, **measure(sandbox),
                           "submit, early": submit_s(sandbox, True), "submit, not early": submit_s(sandbox, False)}
            finally:
                close = seconds(sandbox.close)
            figures["start"] += close
            if round_:
                for name, value in figures.items():
                    add(runtime, name, value)
    print(f"{'median s (' + str(opts.n) + ' rounds)':<28}{'runc':>10}{'runsc':>10}{'runsc/runc':>12}")
    for name in ("start", "command", "file op", "pytest", "verification", "submit, early", "submit, not early"):
        runc, runsc = (statistics.median(samples[(name, r)]) for r in RUNTIMES)
        label = "start + close" if name == "start" else name
        print(f"{label:<28}{runc:>10.3f}{runsc:>10.3f}{runsc / runc:>11.2f}x")
    runsc_early = statistics.median(samples[("submit, early", "runsc")])
    runc_today = statistics.median(samples[("submit, not early", "runc")])
    print(f"{'submit runsc early/runc not':<28}{'':>20}{runsc_early / runc_today:>11.2f}x")
    print("phase table (median s)")
    for name, label in PHASES:
        runc, runsc = (statistics.median(samples[(name, r)]) for r in RUNTIMES)
        ratio = f"{runsc / runc:>11.2f}x" if runc > 0 else f"{'-':>12}"
        print(f"{label:<30}{runc:>10.4f}{runsc:>10.4f}{ratio}")
    if opts.large:  # small files (the listing costs what the copy does), then large ones
        large_rows(opts.large, 200, max(1, min(opts.n, 3)), opts.image)
        large_rows(max(1, opts.large // 12), 180_000, max(1, min(opts.n, 3)), opts.image)
    if opts.tasks:
        batch_rows(opts.tasks, opts.explore_turns, opts.image)


def large_rows(files: int, size: int, rounds: int, image: str) -> None:
    """``submit`` (early) on the example plus ``files`` files of ``size``
    bytes, one file changed: the whole copy sent, then only what changed."""
    repo = Path(tempfile.mkdtemp(prefix="escrow-bench-large-")) / "repo"
    for name in ("calc.py", "test_calc.py"):
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes((EXAMPLE / name).read_bytes())
    for n in range(files):
        (repo / f"data{n % 50}").mkdir(exist_ok=True)
        (repo / f"data{n % 50}" / f"f{n}.txt").write_text(f"file {n}\n".ljust(size, "."))
    client, policy = connect(), default_policy()
    times: dict[tuple[str, bool], list[float]] = {}
    sent: dict[tuple[str, bool], int] = {}
    for _ in range(rounds):
        for runtime in RUNTIMES:
            with Sandbox.start(client, image, policy, repo, runtime=runtime) as sandbox:  # type: ignore[arg-type]
                sandbox.bash("sed -i 's/(len(values) + 1)/len(values)/' calc.py", LIMITS)
                for changed_only in (False, True):
                    times.setdefault((runtime, changed_only), []).append(submit_s(sandbox, True, changed_only))
                    sent[(runtime, changed_only)] = sandbox.starting.refills[-1].sent
    print(f"submit, {files} files of {size} B, 1 changed, early verifier ({rounds} rounds; files sent)")
    for changed_only, label in ((False, "  whole copy"), (True, "  only what changed")):
        runc, runsc = (statistics.median(times[(r, changed_only)]) for r in RUNTIMES)
        label = f"{label} ({sent[('runc', changed_only)]})"
        print(f"{label:<28}{runc:>10.3f}{runsc:>10.3f}{runsc / runc:>11.2f}x")
    for runtime in RUNTIMES:
        whole, changed = (statistics.median(times[(runtime, c)]) for c in (False, True))
        print(f"  {runtime}: only what changed / whole copy {changed / whole:.2f}x")


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
