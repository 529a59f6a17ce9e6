"""The ACL decides on resolved paths. A symlink inside the workspace whose
written path is allowed but which resolves into a denied place (a deny glob,
or .git) is denied before the file op acts, with the rule recorded; the
denied file's content never comes back and a denied target never changes.
Links are planted by a command and, for a policy without bash, by the repo."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.toolset import TOOLS
from policies import Effect, decide, default_policy
from sandbox import Sandbox, ToolBox
from sandbox.loop_tools import outcome_of
from tests.sandbox.conftest import all_at_once, assert_hardened

pytestmark = pytest.mark.docker

SECRET = "escrow-denied-4b1d"
BASE = default_policy()
POLICY = BASE.model_copy(update={"paths": BASE.paths.model_copy(
    update={"deny": (*BASE.paths.deny, "secrets", "secrets/**", "**/*.key")})})
NO_BASH = POLICY.model_copy(update={"tools": POLICY.tools.model_copy(
    update={"allowed": tuple(t for t in POLICY.tools.allowed if t != "bash")})})

PLANTS = {
    "dir-link": "ln -s ../secrets docs/s",
    "file-link": "ln -s secrets/token.txt tok",
    "chain": "ln -s ../secrets docs/s; ln -s docs/s c2; ln -s c2 c1",
    "dotdot-in-target": "ln -s ../docs/../secrets/token.txt docs/t",
    "glob-by-name": "ln -s ../data/id.key docs/plain.txt",
    "git-dir": "ln -s .git g",
    "git-chain": "ln -s g g2; ln -s .git g",
    "absolute-target": "ln -s /workspace/secrets docs/abs",
}
ATTACKS = [  # (plant, tool, arguments)
    ("dir-link", "read_file", {"path": "docs/s/token.txt"}),
    ("dir-link", "write_file", {"path": "docs/s/new.txt", "content": "x"}),
    ("dir-link", "edit_file", {"path": "docs/s/token.txt", "old": SECRET, "new": "gone"}),
    ("dir-link", "list_files", {"path": "docs/s"}),
    ("file-link", "read_file", {"path": "tok"}),
    ("file-link", "edit_file", {"path": "tok", "old": SECRET, "new": "gone"}),
    ("file-link", "write_file", {"path": "tok", "content": "overwritten"}),
    ("chain", "read_file", {"path": "c1/token.txt"}),
    ("dotdot-in-target", "read_file", {"path": "docs/t"}),
    ("glob-by-name", "read_file", {"path": "docs/plain.txt"}),
    ("git-dir", "read_file", {"path": "g/config"}),
    ("git-dir", "write_file", {"path": "g/hooks/pre-commit", "content": "#!/bin/sh\necho pwned\n"}),
    ("git-dir", "edit_file", {"path": "g/HEAD", "old": "ref", "new": "pwned"}),
    ("git-dir", "list_files", {"path": "g"}),
    ("git-chain", "write_file", {"path": "g2/config", "content": "[core]\n\tfsmonitor = pwned\n"}),
    ("absolute-target", "read_file", {"path": "docs/abs/token.txt"}),
]


def make_repo(root: Path, links: dict[str, str] | None = None) -> Path:
    repo = root / "repo"
    (repo / "secrets").mkdir(parents=True)
    (repo / "docs").mkdir()
    (repo / "data").mkdir()
    (repo / "secrets" / "token.txt").write_text(SECRET + "\n")
    (repo / "data" / "id.key").write_text(SECRET + "\n")
    (repo / "docs" / "readme.txt").write_text("hello\n")
    for name, target in (links or {}).items():
        os.symlink(target, repo / name)
    if links:  # committed, as a repo someone else owns would carry them
        for args in (
            ["init", "-q"],
            ["add", "-A"],
            ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
        ):
            subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


def call(toolbox: ToolBox, tool: str, args: dict):
    parsed = TOOLS[tool].model_validate_json(json.dumps(args))
    # As written, the path is allowed: only resolution can catch it.
    assert decide(tool, parsed, toolbox.policy).effect is Effect.ALLOW, (tool, args)
    return toolbox.execute(tool, parsed)


def state(sandbox: Sandbox) -> str:
    """What a denied write could have changed."""
    code, out = sandbox.container.exec_run(
        ["sh", "-c", "cat secrets/token.txt .git/config .git/HEAD; ls secrets .git/hooks"], user=sandbox.spec.user,
        workdir="/workspace")
    return out.decode()


@pytest.fixture
def sandbox(docker_client, sandbox_image, sandbox_runtime, tmp_path):
    box = Sandbox.start(docker_client, sandbox_image, POLICY, make_repo(tmp_path), runtime=sandbox_runtime)
    assert_hardened(docker_client, box, POLICY)
    yield box
    box.close()


@pytest.mark.parametrize("plant,tool,args", ATTACKS, ids=[f"{p}-{t}-{i}" for i, (p, t, _) in enumerate(ATTACKS)])
def test_links_into_denied_paths_are_denied_on_the_resolved_path(sandbox, plant, tool, args):
    toolbox = ToolBox(sandbox, POLICY)
    assert sandbox.bash(PLANTS[plant], toolbox.limits()).exit_code == 0
    before = state(sandbox)
    result = call(toolbox, tool, args)

    assert not result.ok and result.exit_code is None
    assert "resolves to" in result.observation and "denied by policy" in result.observation
    assert SECRET not in result.observation
    assert result.resolved_rule and result.resolved_rule.startswith("paths.deny")
    outcome = outcome_of(result)
    assert (outcome.resolved_rule, outcome.resolved_path) == (result.resolved_rule, result.resolved_path)
    assert result.resolved_path.startswith((".git", "secrets", "data/id.key"))
    assert state(sandbox) == before, "a denied op changed its target"


def test_links_to_allowed_places_still_work_and_record_the_resolved_path(sandbox):
    toolbox = ToolBox(sandbox, POLICY)
    assert sandbox.bash("ln -s docs d; ln -s readme.txt docs/r", toolbox.limits()).exit_code == 0
    read = call(toolbox, "read_file", {"path": "d/r"})
    assert read.ok and read.observation == "hello\n" and read.resolved_path == "docs/readme.txt"
    assert call(toolbox, "write_file", {"path": "d/new.txt", "content": "n"}).resolved_path == "docs/new.txt"
    assert call(toolbox, "read_file", {"path": "docs/new.txt"}).observation == "n"


@pytest.mark.parametrize("link,target,path", [
    ("docs/s", "../secrets", "docs/s/token.txt"),
    ("g", ".git", "g/config"),
    ("x", "docs/../secrets/token.txt", "x"),
])
def test_repo_links_are_judged_resolved_in_a_policy_without_bash(docker_client, sandbox_image, sandbox_runtime,
        tmp_path,
                                                                  link, target, path):
    repo = make_repo(tmp_path, {link: target})
    with Sandbox.start(docker_client, sandbox_image, NO_BASH, repo, runtime=sandbox_runtime) as sandbox:
        result = call(ToolBox(sandbox, NO_BASH), "read_file", {"path": path})
    assert not result.ok and SECRET not in result.observation and "resolves to" in result.observation


@pytest.mark.parametrize("path,depth", [(".", 3), ("docs", 3), (".", 1)])
def test_a_listing_shows_no_name_under_a_deny_glob(sandbox, path, depth):
    """Names below .git, secrets/** or **/*.key are as private as their
    contents: a listing of an allowed directory leaves them out, also when a
    link inside it points at a denied place."""
    toolbox = ToolBox(sandbox, POLICY)
    assert (
        sandbox.bash(
            "ln -s ../secrets docs/s; mkdir -p docs/deep; touch docs/deep/leak.key", toolbox.limits()
        ).exit_code
        == 0
    )
    result = call(toolbox, "list_files", {"path": path, "depth": depth})
    assert result.ok, result.observation
    entries = result.observation.splitlines()
    assert entries, "the listing is empty"
    for entry in entries:
        name = entry.rstrip("/@")
        full = name if path == "." else f"{path}/{name}"
        assert not full.startswith((".git", "secrets")), entry
        assert not full.endswith(".key"), entry
    if path == "docs":
        assert "readme.txt" in entries and "s@" in entries  # the link itself is a name in docs, shown as a link


def test_closes_racing_on_one_sandbox_all_succeed_and_remove_it(docker_client, sandbox_image, sandbox_runtime,
        tmp_path):
    """Two closers at once (a cancelled start's clean-up and another's):
    dockerd answers the later one 409 "removal already in progress", which
    is not a failure to remove; every close returns once the container is gone."""
    import docker.errors

    box = Sandbox.start(docker_client, sandbox_image, POLICY, make_repo(tmp_path), runtime=sandbox_runtime)
    assert all_at_once(box.close, 4) == []
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(box.container.id)
