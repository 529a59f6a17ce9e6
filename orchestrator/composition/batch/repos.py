"""A task's repository as a working copy at its commit.

Where the repository comes from, first match wins:
1. ``<task file dir>/<task id>/repo/``: a micro-repository kept as plain files
   (``examples/tasks``), materialised with a reproducible commit id that must
   equal the row's commit;
2. ``repo`` as a local path (relative to the task file) or a git URL, cloned
   and checked out at the row's commit (a local path without a commit is used as is);
3. a SWE-bench ``owner/name``, cloned from GitHub.
"""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.composition.batch.errors import RepoError
from orchestrator.composition.batch.microrepo import checkout, materialise
from orchestrator.composition.batch.tasks import BatchTask

GITHUB_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def prepare_repo(task: BatchTask, tasks_dir: Path, work: Path) -> Path:
    dest = work / "repo"
    micro = tasks_dir / task.id / "repo"
    if micro.is_dir():
        commit = materialise(micro, dest)
        if task.commit and not commit.startswith(task.commit):
            raise RepoError(f"task {task.id}: micro-repository {micro} is at {commit[:12]}, the row says "
                            f"{task.commit[:12]} (regenerate the task file)", task_id=task.id)
        return dest
    local = (tasks_dir / task.repo).expanduser()
    if local.is_dir():
        if task.commit is None:
            return local.resolve()
        checkout(local.resolve(), task.commit, dest)
        return dest
    if "://" in task.repo or task.repo.endswith(".git") or task.repo.startswith("git@"):
        source = task.repo
    elif task.form == "swebench" and GITHUB_NAME.match(task.repo):
        source = f"https://github.com/{task.repo}.git"
    else:
        raise RepoError(f"task {task.id}: repo {task.repo!r} is neither a directory nor a git URL", task_id=task.id)
    if task.commit is None:
        raise RepoError(f"task {task.id}: a git URL needs a commit", task_id=task.id)
    checkout(source, task.commit, dest)
    return dest
