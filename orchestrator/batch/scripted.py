"""A scripted model for the example tasks: each task's ``fix.patch`` turned
into ``write_file`` calls then ``submit``, served by the fault server under the
task's key. Shows the batch machinery end to end with known fixes."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from orchestrator.batch.microrepo import git, materialise
from orchestrator.fault_server import Reply, Scenario, ScriptedToolCall


def fixed_files(task_dir: Path) -> dict[str, str]:
    """The files ``fix.patch`` changes, with their content after it applies."""
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        materialise(task_dir / "repo", repo)
        git(repo, "apply", str((task_dir / "fix.patch").resolve()))
        changed = git(repo, "diff", "--name-only").splitlines()
        return {path: (repo / path).read_text() for path in changed}


def fix_script(task_dir: Path, *, tokens_per_s: float | None = None) -> list[Scenario]:
    def call(name: str, **args: str) -> Reply:
        return Reply(tool_calls=(ScriptedToolCall(name=name, arguments=json.dumps(args)),), tokens_per_s=tokens_per_s)

    writes = [call("write_file", path=path, content=content) for path, content in fixed_files(task_dir).items()]
    return [*writes, call("submit", summary="applied the known fix")]


def example_scripts(root: Path, **pace: float | None) -> dict[str, list[Scenario]]:
    return {d.name: fix_script(d, **pace) for d in sorted(root.iterdir()) if (d / "fix.patch").is_file()}
