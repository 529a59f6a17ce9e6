"""A fresh (verifier's) container gets the starting copy's repository by
extraction: made once per run on the host, it holds the starting copy as
HEAD, so ``git status`` there shows exactly the patch."""

from __future__ import annotations

import pytest

import sandbox.starting_copy as copy_module
from policies import default_policy
from sandbox import ExecLimits, Sandbox

pytestmark = pytest.mark.docker
LIMITS = ExecLimits(timeout_s=30, stdout_cap=8192, stderr_cap=4096)


def test_the_verifiers_repo_is_the_starting_copy_and_is_made_once(docker_client, sandbox_image, sandbox_runtime,
        tmp_path,
                                                                   monkeypatch):
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "util.py").write_text("X = 1\n")
    made = []
    real = copy_module.starting_repo_tar
    monkeypatch.setattr(copy_module, "starting_repo_tar", lambda git, base: made.append(base) or real(git, base))
    policy = default_policy()
    # new.py: a kind of file the starting copy holds, so the verifier's allow-list takes it
    with Sandbox.start(docker_client, sandbox_image, policy, tmp_path, runtime=sandbox_runtime) as sandbox:
        sandbox.bash("sed -i 's/a - b/a + b/' calc.py && echo Y = 2 > new.py", LIMITS)
        patch = sandbox.patch()
        for _ in range(2):
            copy = sandbox.starting.verifier_copy(patch, policy, sandbox.installed_modules)
            with sandbox.fresh(sandbox.starting.archive_for(copy), "verify") as verifier:
                status = verifier.bash("git status --short; git log --format=%H; git diff --stat | tail -1",
                                       LIMITS).stdout.text().splitlines()
                assert status[:2] == [" M calc.py", "?? new.py"]
                assert status[2] == sandbox.base and "1 file changed, 1 insertion(+), 1 deletion(-)" in status[3]
                owner = verifier.bash("stat -c %u .git/index .git/HEAD | sort -u", LIMITS).stdout.text()
                assert owner == "1000\n"
    assert made == [sandbox.base]  # once for the run, however many verifications
