"""The cost of sealing the exit, measured side by side in one run:

  export: tar + tarfile extract + git add (the previous path, copied below)
          against the framed export parsed into a private git (Sandbox.patch)
  verify: the verifier in the model's own container (the previous path)
          against a fresh container on the starting copy + patch
  setup:  a fresh container that runs git add -A of the whole tree (the
          previous path) against one that extracts the starting copy's
          repository made once per run; samples alternate
  verifier's copy: the whole patched tree built in host memory (the path
          before protected and hidden inputs, copied below) against the
          policy's copy (protected inputs restored, shadowing modules left
          out, hidden paths), planned and streamed a blob at a time; samples
          alternate between the two
  evidence: a verification as before (fresh container, the verify command)
          against ToolBox's with the evidence steps: the first submit of a
          run doing the trusted pre-pass itself (collecting the required
          tests from the starting copy in its fresh container, the workspace
          refilled with the patched copy, the verify command under the
          reporter, its channel read back and judged); the first submit
          whose container and pre-pass were started early, while the agent
          works (only the refill and the judged run on its path); and a
          later submit (the list is known: only the reporter and the
          channel), in a container it starts and in one started early;
          samples alternate
  attack: one 1 MB file hard-linked 600 times: host peak memory and time of
          the new export (refused at the patch cap); --old-attack also runs
          the previous path on it (hundreds of MB, GBs of memory: use with care)

on examples/calculator and on a generated repo of 5,000 files.

Usage: .venv/bin/python bench/bench_exit.py [--n 5] [--image TAG] [--old-attack] [--evidence-only]
       [--runtime runc|runsc ...]
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

from orchestrator.settings import DEFAULT_SANDBOX_IMAGE
from policies import Policy, default_policy
from sandbox import ExecLimits, Sandbox, ToolBox, connect
from sandbox.capture import BytesCapture
from sandbox.errors import ExportRefused
from sandbox.git_blobs import stream_archive
from sandbox.hostgit import PrivateGit
from sandbox.runtime import RuntimeName
from sandbox.workspace import tree_entries

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


# --- the verifier's copy before [verify] (sandbox/workspace.py tree_archive), kept here
# --- only to measure against: the whole patched tree as one tar in host memory.
def old_tree_archive(git: PrivateGit, commit: str, max_bytes: int) -> bytes:
    entries = tree_entries(git, commit)
    shas = sorted({sha for _, sha in entries.values()})
    out = git.run("cat-file", "--batch", input="".join(f"{s}\n" for s in shas).encode()).stdout
    blobs, at = {}, 0
    for sha in shas:
        header_end = out.index(b"\n", at)
        _, _, size = out[at:header_end].split(b" ")
        start = header_end + 1
        blobs[sha] = out[start : start + int(size)]
        at = start + int(size) + 1
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, (mode, sha) in sorted(entries.items()):
            info = tarfile.TarInfo(path.decode("utf-8", "surrogateescape"))
            info.uid, info.gid, info.mtime = 1000, 1000, 0
            data = blobs[sha]
            if mode == "120000":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, data.decode("utf-8", "surrogateescape"), 0o777
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o755 if mode == "100755" else 0o644
                tar.addfile(info, io.BytesIO(data))
            if buffer.tell() > max_bytes:
                raise ExportRefused(f"the patched workspace is larger than {max_bytes} bytes")
    return buffer.getvalue()


def alternated(a: Callable[[], object], b: Callable[[], object], n: int) -> tuple[float, float]:
    """Medians of ``a`` and ``b`` timed in turn (a, b, a, b, ...), so drift in the machine's load hits both."""
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(n):
        for fn, out in ((a, samples[0]), (b, samples[1])):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return statistics.median(samples[0]), statistics.median(samples[1])


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
        git = sandbox.git
        assert git is not None
        old_patch(sandbox, Path(work))  # the old path's starting copy, not counted
        sandbox.bash("for f in $(find . -name '*.py' | head -3); do echo '# changed' >> $f; done", LIMITS)
        old_patch(sandbox, Path(work))  # warm-up, not counted
        sandbox.patch()
        out["export old (tar)"] = statistics.median(timed(lambda: old_patch(sandbox, Path(work)), n))
        out["export new (framed)"] = statistics.median(timed(sandbox.patch, n))
        patch = sandbox.patch()
        out["verify old (same container)"] = statistics.median(timed(lambda: sandbox.bash(VERIFIER, LIMITS), n))

        def fresh_verify() -> None:
            with sandbox.fresh(sandbox.starting.archive_of(patch), "bench") as verifier:
                verifier.bash(VERIFIER, LIMITS)

        out["verify new (fresh container)"] = statistics.median(timed(fresh_verify, n))

        def setup_in_container() -> None:
            """The fresh container as before: the patched tree, then git add -A of every file in it."""
            tree = stream_archive(git, tree_entries(git, patch.tree), sandbox.spec.workspace_bytes)
            state = Path(tempfile.mkdtemp(prefix="escrow-bench-"))
            Sandbox._launch(sandbox.client, sandbox.spec, sandbox.run_id, f"escrow-bench-{time.time_ns()}", tree,
                            state, True, None, "", make_repo=True).close()

        def setup_extracted() -> None:
            with sandbox.fresh(sandbox.starting.archive_of(patch), "bench"):
                pass

        sandbox.starting.repo()  # made once per run, before the first verification
        out["setup old (git add in container)"], out["setup new (repo extracted)"] = alternated(
            setup_in_container, setup_extracted, n)
        hiding = policy.model_copy(update={"verify": policy.verify.model_copy(
            update={"hidden": ("test_*.py", "pkg1/**")})})

        def whole_tree_verify() -> None:
            with sandbox.fresh(old_tree_archive(git, patch.tree, sandbox.spec.workspace_bytes), "bench") as verifier:
                verifier.bash(VERIFIER, LIMITS)

        def policy_copy_verify(under: Policy) -> Callable[[], None]:
            def verify() -> None:
                copy = sandbox.starting.verifier_copy(patch, under, sandbox.installed_modules)
                with sandbox.fresh(sandbox.starting.archive_for(copy), "bench") as verifier:
                    verifier.bash(VERIFIER, LIMITS)
            return verify

        sandbox.installed_modules()  # listed once per sandbox, as in a run
        # Three-way alternation: each sample of the two new paths sits between samples of the old one.
        before, protected = alternated(whole_tree_verify, policy_copy_verify(policy), n)
        before_h, hidden = alternated(whole_tree_verify, policy_copy_verify(hiding), n)
        out["copy old (whole tree, memory)"] = before
        out["copy new (protected, streamed)"] = protected
        out["copy old (again, for + hidden)"] = before_h
        out["copy new (+ hidden, streamed)"] = hidden
    return out


def bench_evidence(client, image: str, repo: Path, n: int, runtime: RuntimeName) -> dict[str, float]:
    """Verification with and without the evidence steps, through ToolBox's
    own verify path (``_verify``, ``_evidence``): a verification without
    evidence (the old one); a run's first submit that does the pre-pass
    itself; a first submit whose pre-pass and container were started early
    (``start_early``; the time until it is ready is the agent's, not counted
    here but shown); a later submit (the list is known) in a container it
    starts, and in one started early. Samples alternate."""
    policy = default_policy()
    with Sandbox.start(client, image, policy, repo, runtime=runtime) as sandbox:
        sandbox.bash("sed -i 's/(len(values) + 1)/len(values)/' calc.py", LIMITS)
        copy = sandbox.starting.verifier_copy(sandbox.patch(), policy, sandbox.installed_modules)
        sandbox.starting.archive_for(copy)  # the repository is made once per run, before the first verification
        later = ToolBox(sandbox, policy, verifier_command=VERIFIER)

        def verified(box: ToolBox, evidence: bool = True) -> None:
            outcome, channel = box._verify(copy, evidence)
            assert box._evidence(outcome, channel, evidence).passed

        def plain() -> None:
            verified(later, evidence=False)

        def first_inline() -> None:
            verified(ToolBox(sandbox, policy, verifier_command=VERIFIER))

        early_box: list[ToolBox] = []
        ready: list[float] = []

        def start_early(box: ToolBox) -> None:
            """Untimed: the early start runs while the model would think."""
            start = time.perf_counter()
            box.start_early()
            assert box._early is not None
            while not box._early.done:
                time.sleep(0.005)
            if box is not later:
                ready.append(time.perf_counter() - start)
            early_box.append(box)

        def from_early() -> None:
            verified(early_box.pop())

        plain()  # warm-up, not counted
        verified(later)  # its pre-pass: later submits know the list
        steps = (plain, first_inline, from_early, lambda: verified(later), from_early)
        samples: tuple[list[float], ...] = tuple([] for _ in steps)
        for _ in range(n):
            for index, (fn, out) in enumerate(zip(steps, samples, strict=True)):
                if index in (2, 4):  # the first submit's container and pre-pass, a later submit's container
                    start_early(ToolBox(sandbox, policy, verifier_command=VERIFIER) if index == 2 else later)
                start = time.perf_counter()
                fn()
                out.append(time.perf_counter() - start)
    return {"verify without evidence": statistics.median(samples[0]),
            "1st submit, pre-pass inline": statistics.median(samples[1]),
            "1st submit, pre-pass early": statistics.median(samples[2]),
            "later submits (reporter)": statistics.median(samples[3]),
            "later submits, container early": statistics.median(samples[4]),
            "  1st's early start, off the path": statistics.median(ready)}


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
    parser.add_argument("--image", default=DEFAULT_SANDBOX_IMAGE)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--old-attack", action="store_true")
    parser.add_argument("--evidence-only", action="store_true", help="only the evidence steps' side by side")
    parser.add_argument("--runtime", action="append", choices=["runc", "runsc"],
                        help="runtimes of the evidence side by side (repeatable; default runc)")
    opts = parser.parse_args()
    opts.runtime = opts.runtime or ["runc"]
    client = connect()
    print(f"{'repo':14} {'step':33} {'median s':>9} {'new/old':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        example = Path(tmp) / "calculator"
        shutil.copytree(EXAMPLE, example, ignore=shutil.ignore_patterns(".benchmarks", "__pycache__", ".pytest_cache"))
        repos = () if opts.evidence_only else (("example", example),
                                                (f"{opts.files} files", generated_repo(Path(tmp), opts.files)))
        for name, repo in repos:
            figures = bench_repo(client, opts.image, repo, opts.n)
            for step, seconds in figures.items():
                kind = step.split()[0]
                old = {"export": "(tar)", "verify": "(same container)", "copy": "(whole tree, memory)",
                       "setup": "(git add in container)"}[kind]
                if "hidden" in step:
                    old = "(again, for + hidden)"
                ratio = seconds / figures[f"{kind} old {old}"]
                print(f"{name:14} {step:33} {seconds:9.3f} {ratio:8.2f}")
        for runtime in opts.runtime:
            evidence = bench_evidence(client, opts.image, example, opts.n, runtime)
            for step, seconds in evidence.items():
                ratio = seconds / evidence["verify without evidence"]
                print(f"{'example ' + runtime:14} {step:33} {seconds:9.3f} {ratio:8.2f}")
    if opts.evidence_only:
        return
    bench_attack(client, opts.image, opts.old_attack)


if __name__ == "__main__":
    main()
