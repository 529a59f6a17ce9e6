"""The live parts a re-execution or fork needs: a fresh hardened sandbox on
the recorded starting workspace (the run's repo path), with the recorded
policy and verifier. A batch run's start is a kept workspace whose digest
the run recorded (``sandbox.kept``): it is checked before anything starts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator.agent import RunResult
from orchestrator.canonical import shown_text
from orchestrator.composition.launch.live_run import PatchRecorder
from orchestrator.replay.errors import ReplayError
from orchestrator.replay.recorded import RecordedRun
from policies import Policy
from sandbox import Sandbox, ToolBox, connect, require_image
from sandbox.kept import tree_digest
from sandbox.loop_tools import SandboxTools
from sandbox.runtime import choose_runtime
from store import Recorder


class WorkspaceGone(ReplayError):
    """The recorded starting workspace no longer exists."""


class WorkspaceChanged(ReplayError):
    """The kept starting workspace is no longer what the run started from."""


class WorkspaceTools(SandboxTools):
    """Sandbox tools that can also say how the workspace changed (the patch),
    which a re-execution compares with the recorded one."""

    def __init__(self, sandbox: Sandbox, toolbox: ToolBox, policy: Policy) -> None:
        super().__init__(toolbox, policy)
        self.sandbox = sandbox

    def record_patch(self, recorder: Recorder, run_id: str, result: RunResult) -> None:
        """Record the workspace's patch before the verdict, as a live run does
        (``PatchRecorder``): a fork's fix is the run's result."""
        PatchRecorder(self.sandbox, self.toolbox, recorder, run_id).record(result)

    def patch_text(self) -> str:
        """The workspace's patch as the record's readable text (``shown_text``), so equal bytes compare equal."""
        return shown_text(self.sandbox.patch().data)


def sandbox_tools_for(recorded: RecordedRun, *, image: str, docker_host: str | None = None):
    """A ``tools_for(run_id)`` for the Replayer; checks Docker, the image, the
    runtime and the workspace before anything is recorded. The tools run under
    the runtime the run recorded (a run from before runtimes were recorded ran
    under runc)."""
    repo = Path(recorded.repo)
    if not repo.is_dir():
        raise WorkspaceGone(f"the recorded starting workspace {repo} is not a directory any more; "
                            "re-execution and fork run the tools on it", repo=str(repo))
    expected = recorded.config.get("workspace_sha256")
    if expected is not None and (found := tree_digest(repo)) != expected:
        raise WorkspaceChanged(f"the kept starting workspace {repo} changed since the run (its files' sha256 "
                               f"is {found[:12]}, the run started from {str(expected)[:12]}); re-execution and "
                               "fork would not start where the run did", repo=str(repo))
    client = connect(docker_host)
    require_image(client, image)
    runtime = choose_runtime(client, recorded.config.get("sandbox_runtime") or "runc").name

    @contextmanager
    def tools_for(run_id: str) -> Iterator[SandboxTools]:
        with Sandbox.start(client, image, recorded.policy, repo, run_id=run_id, runtime=runtime) as sandbox:
            yield WorkspaceTools(sandbox, ToolBox(sandbox, recorded.policy, verifier_command=recorded.spec.verifier,
                                                     verifier_patch=recorded.spec.verifier_patch,
                                                     required_tests=recorded.spec.required_tests),
                                 recorded.policy)

    return tools_for
