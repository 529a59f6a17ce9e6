"""The cost of sealing the exit, measured side by side in one run:

  export: tar + tarfile extract + git add (the previous path, copied below)
          against the framed export parsed into a private git (Sandbox.patch)
  verify: the verifier in the model's own container (the previous path)
          against a fresh container on the starting copy + patch
  attack: one 1 MB file hard-linked 600 times: host peak memory and time of
          the new export (refused at the patch cap); --old-attack also runs
          the previous path on it (hundreds of MB, GBs of memory: use with care)

on examples/calculator and on a generated repo of 5,000 files.

Usage: .venv/bin/python bench/bench_exit.py [--n 5] [--image TAG] [--old-attack]
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from policies import default_policy
from sandbox import ExecLimits, Sandbox, connect
from sandbox.capture import BytesCapture
from sandbox.errors import ExportRefused

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "calculator"
LIMITS = ExecLimits(timeout_s=300, stdout_cap=4096, stderr_cap=4096)
VERIFIER = "python3 -m pytest -q -p no:cacheprovider"


# --- the previous export path (sandbox/workspace.py before the exit was sealed), kept
# --- here only to measure against; it extracts sandbox content on the host and is unsafe.
def old_patch(sandbox: Sandbox, work: Path) -> int:
    """The old export and diff; the first call on ``work`` commits the starting copy."""
    capture = BytesCapture(sandbox.spec.workspace_bytes * 2)
    outcome = sandbox.exec(["/bin/tar", "-c", "-C", "/workspace", "--exclude=./.git", "."], LIMITS,
                           stdout_capture=capture)
    assert outcome.exit_code == 0 and not capture.overflowed
    after = work / "after"
    shutil.rmtree(after, ignore_errors=True)
    after.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(bytes(capture.data)), mode="r:") as tar:
        tar.extractall(after, filter="data")
    git_dir = work / "base.git"
    env = {"PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(work)}
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b", f"--git-dir={git_dir}", f"--work-tree={after}"]
    if not git_dir.exists():
        subprocess.run([*git, "init", "-q"], env=env, check=True)
        subprocess.run([*git, "add", "-A"], env=env, check=True, capture_output=True)
        subprocess.run([*git, "commit", "-qm", "base"], env=env, check=True)
    subprocess.run([*git, "add", "-A"], env=env, check=True, capture_output=True)
    return len(subprocess.run([*git, "diff", "--cached", "--binary", "HEAD"], env=env, check=True,
                              capture_output=True).stdout)


def timed(fn: Callable[[], object], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def generated_repo(root: Path, files: int) -> Path:
    repo = root / f"gen{files}"
    for i in range(files):
        path = repo / f"pkg{i % 50}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"def f{i}(x):\n    return x + {i}\n" * 10)
    (repo / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    return repo


def peak_mib() -> tuple[float, float]:
    """Peak RSS so far of this process and of its waited-for children (git), in MiB."""
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)


def bench_repo(client, image: str, repo: Path, n: int) -> dict[str, float]:
    policy = default_policy()
    out: dict[str, float] = {}
    with Sandbox.start(client, image, policy, repo) as sandbox, tempfile.TemporaryDirectory() as work:
        old_patch(sandbox, Path(work))  # the old path's starting copy, not counted
        sandbox.bash("for f in $(find . -name '*.py' | head -3); do echo '# changed' >> $f; done", LIMITS)
        old_patch(sandbox, Path(work))  # warm-up, not counted
        sandbox.patch()
        out["export old (tar)"] = statistics.median(timed(lambda: old_patch(sandbox, Path(work)), n))
        out["export new (framed)"] = statistics.median(timed(sandbox.patch, n))
        patch = sandbox.patch()
        out["verify old (same container)"] = statistics.median(timed(lambda: sandbox.bash(VERIFIER, LIMITS), n))

        def fresh_verify() -> None:
            with sandbox.fresh(sandbox.archive_of(patch), "bench") as verifier:
                verifier.bash(VERIFIER, LIMITS)

        out["verify new (fresh container)"] = statistics.median(timed(fresh_verify, n))
    return out


def bench_attack(client, image: str, old: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        (repo / "a.txt").write_text("a\n")
        with Sandbox.start(client, image, default_policy(), repo) as sandbox:
            if old:
                old_patch(sandbox, Path(tmp) / "old")  # the old path's starting copy
            sandbox.bash("head -c 1000000 /dev/urandom | base64 > big && for i in $(seq 600); do ln big l$i; done",
                         LIMITS)
            start = time.perf_counter()
            try:
                size = len(sandbox.patch().text)
                result = f"patch of {size} bytes"
            except ExportRefused as exc:
                result = f"refused: {exc}"
            own, git = peak_mib()
            print(f"attack, new export: {time.perf_counter() - start:.2f} s, {result}; "
                  f"peak RSS so far: escrow {own:.0f} MiB, host git {git:.0f} MiB")
            if old:
                start = time.perf_counter()
                size = old_patch(sandbox, Path(tmp) / "old")
                own, git = peak_mib()
                print(f"attack, old export: {time.perf_counter() - start:.2f} s, patch of {size} bytes; "
                      f"peak RSS so far: escrow {own:.0f} MiB, host git {git:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--image", default="escrow-sandbox:bookworm-1")
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--old-attack", action="store_true")
    opts = parser.parse_args()
    client = connect()
    print(f"{'repo':16} {'step':30} {'median s':>9} {'new/old':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        example = Path(tmp) / "calculator"
        shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns(".benchmarks", "__pycache__", ".pytest_cache"))
        for name, repo in (("example", example), (f"{opts.files} files", generated_repo(Path(tmp), opts.files))):
            figures = bench_repo(client, opts.image, repo, opts.n)
            for step, seconds in figures.items():
                kind = step.split()[0]
                ratio = seconds / figures[f"{kind} old " + ("(tar)" if kind == "export" else "(same container)")]
                print(f"{name:16} {step:30} {seconds:9.3f} {ratio:8.2f}")
    bench_attack(client, opts.image, opts.old_attack)


if __name__ == "__main__":
    main()
