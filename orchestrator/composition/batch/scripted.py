"""A scripted model for the example tasks: each task's ``fix.patch`` turned
into ``write_file`` calls then ``submit``, served by the fault server under the
task's key. Shows the batch machinery end to end with known fixes.

``text=True`` writes each call in the text tool protocol, its sampled ids
those of the fault server's toy tokenizer (``chat_tokens.ids``), as
``--token-exact`` on the fault server's vLLM routes reads them."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from orchestrator.adapters.fault_server import Reply, Scenario, ScriptedToolCall
from orchestrator.adapters.fault_server.chat_tokens import ids
from orchestrator.composition.batch.microrepo import git, materialise


def fixed_files(task_dir: Path) -> dict[str, str]:
    """The files ``fix.patch`` changes, with their content after it applies."""
    with tempfile.TemporaryDirectory() as scratch:
        repo = Path(scratch) / "repo"
        materialise(task_dir / "repo", repo)
        git(repo, "apply", str((task_dir / "fix.patch").resolve()))
        changed = git(repo, "diff", "--name-only").splitlines()
        return {path: (repo / path).read_text() for path in changed}


def fix_script(task_dir: Path, *, tokens_per_s: float | None = None, text: bool = False) -> list[Scenario]:
    def call(name: str, **args: str) -> Reply:
        if text:
            written = f'<tool name="{name}">{json.dumps(args)}</tool>'
            return Reply(text=written, completion_token_ids=ids(written), tokens_per_s=tokens_per_s)
        return Reply(tool_calls=(ScriptedToolCall(name=name, arguments=json.dumps(args)),), tokens_per_s=tokens_per_s)

    writes = [call("write_file", path=path, content=content) for path, content in fixed_files(task_dir).items()]
    return [*writes, call("submit", summary="applied the known fix")]


def example_scripts(root: Path, *, tokens_per_s: float | None = None,
                    text: bool = False) -> dict[str, list[Scenario]]:
    return {d.name: fix_script(d, tokens_per_s=tokens_per_s, text=text)
            for d in sorted(root.iterdir()) if (d / "fix.patch").is_file()}
