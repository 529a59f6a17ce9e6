"""Micro-repositories: a directory of files made into a git repository whose
commit id is reproducible (fixed author, committer, date and message), so a
task file can name it by ``base_commit``.

    python -m orchestrator.composition.batch.microrepo examples/tasks   # rewrites examples/tasks/tasks.jsonl
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from orchestrator.composition.batch.errors import RepoError

IDENTITY = {
    "GIT_AUTHOR_NAME": "Escrow Examples", "GIT_AUTHOR_EMAIL": "examples@escrow.invalid",
    "GIT_COMMITTER_NAME": "Escrow Examples", "GIT_COMMITTER_EMAIL": "examples@escrow.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+00:00", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+00:00",
}
MESSAGE = "base"


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    # A clean environment: the user's git config (signing, hooks, templates) must not change the commit id.
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
                "GIT_CONFIG_GLOBAL": os.devnull, **(env or {})}
    done = subprocess.run(["git", *args], cwd=cwd, env=full_env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RepoError(f"git {' '.join(args)} failed in {cwd}: {done.stderr.strip()}", cwd=str(cwd))
    return done.stdout.strip()


def materialise(source: Path, dest: Path) -> str:
    """Copy ``source`` (plain files) to ``dest`` as a one-commit git repository; returns the commit id."""
    if not source.is_dir():
        raise RepoError(f"micro-repository {source} is not a directory", source=str(source))
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))
    for path in dest.rglob("*"):
        if path.is_file():
            path.chmod(0o644)  # the mode is part of the tree id
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "--no-verify", "--no-gpg-sign", "-m", MESSAGE, env=IDENTITY)
    return git(dest, "rev-parse", "HEAD")


def checkout(repo: Path | str, commit: str, dest: Path) -> None:
    """A working copy of ``repo`` (local path or git URL) at ``commit`` in ``dest``."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    git(dest.parent, "clone", "-q", "--no-checkout", str(repo), str(dest))
    git(dest, "-c", "advice.detachedHead=false", "checkout", "-q", commit)


def example_rows(root: Path) -> list[dict[str, object]]:
    """The SWE-bench rows of the example tasks under ``root``, base commits computed."""
    rows = []
    scratch = root / ".materialised"
    for task_dir in sorted(p for p in root.iterdir() if (p / "task.json").is_file()):
        meta = json.loads((task_dir / "task.json").read_text())
        commit = materialise(task_dir / "repo", scratch / task_dir.name)
        rows.append({"instance_id": task_dir.name, "repo": f"escrow-examples/{task_dir.name}", "base_commit": commit,
                     **meta})
    shutil.rmtree(scratch, ignore_errors=True)
    return rows


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path("examples/tasks")
    rows = example_rows(root)
    (root / "tasks.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(f"wrote {len(rows)} tasks to {root / 'tasks.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
