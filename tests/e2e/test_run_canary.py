"""INFRA_ERROR only when the infrastructure is at fault, end to end: a
scripted hostile model (the fault server) makes workspaces that broke the
export or the verifier's sandbox, through real ``run_agent`` runs (real
Docker, under runsc and runc, real SQLite). Each once ended INFRA_ERROR,
which batches retry and leave out of the pass rate; now each ends in the
model's verdict with the cause shown to the model: the caps count what the
verifier's copy really takes, and a failure the same step on the starting
copy alone (the canary) does not repeat is the workspace's. A dockerd that
stops starting containers is still INFRA_ERROR, with both failures."""

from __future__ import annotations

import json
import shlex
import socket
from pathlib import Path

import pytest

from orchestrator.adapters.fault_server import Reply, ScriptedToolCall
from orchestrator.agent import Verdict
from orchestrator.composition.launch import RunRequest, run_agent
from orchestrator.settings import Settings
from tests.batch.docker_proxy import FlakyDockerProxy, _pipe
from tests.conftest import require

pytestmark = [pytest.mark.docker]

TASK = "Fix the bug in mean() in calc.py so that the tests pass."
VERIFY = "python3 -m pytest -q -p no:cacheprovider"
DEFAULT_POLICY = Path(__file__).resolve().parents[2] / "policies" / "default.toml"
HIDDEN_TEST = "def test_hidden():\n    from calc import mean\n    assert mean([2, 4]) == 3\n"


def call(name: str, **args: object) -> ScriptedToolCall:
    return ScriptedToolCall(name=name, arguments=json.dumps(args))


def bash(command: str) -> ScriptedToolCall:
    return call("bash", command=command)


def python(code: str) -> ScriptedToolCall:
    return bash(f"python3 -c {shlex.quote(code)}")


SUBMIT = call("submit", summary="done")


@pytest.fixture(params=["runsc", "runc"])
def on(request, settings: Settings, docker_client) -> Settings:
    from sandbox.runtime import registered_runtimes

    require(request.param in registered_runtimes(docker_client), f"the {request.param} runtime in dockerd")
    return settings.model_copy(update={"sandbox_runtime": request.param, "max_turns": 1, "deadline_s": 240.0})


def small_workspace(tmp_path: Path) -> Path:
    """The default policy with a 16 MB workspace: the copy's disk is reached
    with a few thousand links, not a million."""
    path = tmp_path / "small.toml"
    path.write_text(DEFAULT_POLICY.read_text().replace("workspace_mb = 512", "workspace_mb = 16"))
    return path


FEW_FILES = 5000


def few_files(tmp_path: Path) -> Path:
    """The default policy with a 5,000-entry workspace cap: the same refusal
    as the default 50,000's, reached by a tenth of the directories (each one
    costs runsc seconds to make and to walk)."""
    path = tmp_path / "few.toml"
    path.write_text(DEFAULT_POLICY.read_text().replace("workspace_files = 50000", f"workspace_files = {FEW_FILES}"))
    assert f"workspace_files = {FEW_FILES}" in path.read_text()
    return path


def run_hostile(fault, settings: Settings, repo: Path, *calls: ScriptedToolCall, hidden: tuple[str, ...] = ()):
    fault.script([Reply(tool_calls=(*calls, SUBMIT))])
    return run_agent(settings, RunRequest(task=TASK, repo=repo, verify=VERIFY, hidden=hidden))


def submits(open_store, run_id: str) -> list[str]:
    store = open_store()
    return [x.observation for turn in store.trajectory(run_id).turns for x in turn.tool_executions
            if x.tool_name == "submit"]


def assert_models_verdict(outcome, open_store, *shown: str) -> str:
    """Not INFRA_ERROR, nothing recorded as an infrastructure failure, and the
    submit failed with the cause told to the model."""
    assert outcome.result.verdict not in (Verdict.INFRA_ERROR, Verdict.PASS), outcome.result.detail
    assert open_store().events(outcome.run_id, "infra_error") == []
    (observation,) = submits(open_store, outcome.run_id)
    assert observation.startswith(("verifier FAILED", "submit refused")), observation[:500]
    for text in shown:
        assert text in observation, observation[:1000]
    return observation


# -- a protected or hidden file turned into a directory (a path conflict) ---

@pytest.mark.parametrize("hostile", [
    "rm test_calc.py && mkdir test_calc.py && echo 'x = 1' > test_calc.py/mod.py",
    "mkdir -p test_hidden.py/deep && echo 'x = 1' > test_hidden.py/deep/mod.py",
    "rm pkg/test_pkg.py && mkdir -p pkg/test_pkg.py/x && echo 'x = 1' > pkg/test_pkg.py/x/mod.py",
], ids=["protected-file-to-dir", "hidden-file-to-dir", "nested-protected-file-to-dir"])
def test_a_path_conflict_with_a_protected_or_hidden_file_is_the_models_verdict(on, repo, fault, open_store, hostile):
    (repo / "test_hidden.py").write_text(HIDDEN_TEST)
    (repo / "pkg").mkdir()
    (repo / "pkg" / "test_pkg.py").write_text("def test_pkg():\n    pass\n")
    outcome = run_hostile(fault, on, repo, bash(hostile), hidden=("test_hidden.py",))
    assert_models_verdict(outcome, open_store)


# -- hard links and tiny files: within the size cap, over the copy's disk ----

@pytest.mark.parametrize("hostile", [
    "import os; open('f', 'w').write('x' * 4097); [os.link('f', 'l%d' % i) for i in range(2500)]",
    "import os; open('f', 'w').write('x'); [os.link('f', 'l%d' % i) for i in range(5000)]",
    "import os; open('f', 'w').write('x' * 100)\n"
    "for d in range(50):\n os.mkdir('d%d' % d)\n [os.link('f', 'd%d/l%d' % (d, i)) for i in range(100)]",
], ids=["page-and-a-byte", "one-byte", "tiny-in-many-dirs"])
def test_hard_links_over_the_copys_disk_are_the_models_verdict(on, repo, fault, open_store, tmp_path, hostile):
    settings = on.model_copy(update={"policy": small_workspace(tmp_path)})
    outcome = run_hostile(fault, settings, repo, python(hostile))
    assert_models_verdict(outcome, open_store, "each hard link a whole file")


# -- many empty directories --------------------------------------------------

@pytest.mark.parametrize("hostile", [
    "import os; [os.mkdir('e%d' % i) for i in range(6000)]",
    "import os\nfor i in range(60):\n p = 'n%d' % i\n os.makedirs('/'.join([p] * 100))",
    "import os\nfor i in range(30):\n os.mkdir('s%d' % i); [os.mkdir('s%d/%d' % (i, j)) for j in range(200)]",
], ids=["flat", "nested", "spread"])
def test_many_empty_directories_are_the_models_verdict(on, repo, fault, open_store, tmp_path, hostile):
    settings = on.model_copy(update={"policy": few_files(tmp_path)})
    outcome = run_hostile(fault, settings, repo, python(hostile))
    assert_models_verdict(outcome, open_store, f"more than {FEW_FILES} files and directories")


# -- a file operation on a huge sparse file ---------------------------------

EDIT = call("edit_file", path="calc.py", old="sum(values) / (len(values) + 1)", new="sum(values) / len(values)")


@pytest.mark.parametrize("op", [
    call("read_file", path="big.bin"),
    call("read_file", path="big.bin", start_line=2, max_lines=5),
    call("edit_file", path="big.bin", old="x", new="y"),
], ids=["read-whole", "read-window", "edit"])
def test_a_file_op_on_a_huge_sparse_file_leaves_the_sandbox_alive(on, repo, fault, open_store, op):
    """Under runsc a read_file of a 3 GB sparse file ended the sandbox (the
    op had no memory limit): the run ended INFRA_ERROR. Now the op is bounded
    and the same answer's fix is still made and passes."""
    outcome = run_hostile(fault, on, repo, bash("truncate -s 3G big.bin"), op, bash("rm big.bin"), EDIT)
    assert outcome.result.verdict is Verdict.PASS, outcome.result.detail
    assert open_store().events(outcome.run_id, "infra_error") == []


# -- after a refused submit the run goes on ----------------------------------

@pytest.mark.parametrize("hostile, cleanup, capped", [
    ("import os; open('f', 'w').write('x'); [os.link('f', 'l%d' % i) for i in range(5000)]", "rm -f f l*",
     small_workspace),
    ("import os; [os.mkdir('e%d' % i) for i in range(6000)]", "rm -rf e*", few_files),
], ids=["hard-links", "empty-dirs"])
def test_after_a_refused_submit_the_sandbox_answers_and_a_fix_passes(on, repo, fault, open_store, tmp_path,
                                                                       hostile, cleanup, capped):
    """The cap broke while the export was read: the export's command is
    stopped and its result read before the next request (it was left to the
    next command, whose channel then failed: INFRA_ERROR)."""
    fault.script([Reply(tool_calls=(python(hostile), SUBMIT)), Reply(tool_calls=(bash(cleanup), EDIT, SUBMIT))])
    settings = on.model_copy(update={"policy": capped(tmp_path), "max_turns": 2})
    outcome = run_agent(settings, RunRequest(task=TASK, repo=repo, verify=VERIFY))
    assert outcome.result.verdict is Verdict.PASS, outcome.result.detail
    refused, passed = submits(open_store, outcome.run_id)
    assert refused.startswith("submit refused") and passed.startswith("verifier PASSED")


# -- a fork bomb in the code under test --------------------------------------

FORK_LOOP = "import os\nwhile True:\n    os.fork()\n"
BASH_BOMB = "import subprocess\nsubprocess.run('f(){ f|f& };f', shell=True)\n"
FORK_AND_FILL = "import os\nwhile True:\n    os.fork()\n    keep = bytearray(8 << 20)\n"


@pytest.mark.parametrize("bomb", [FORK_LOOP, BASH_BOMB, FORK_AND_FILL], ids=["fork-loop", "bash", "fork-and-fill"])
def test_a_fork_bomb_in_the_code_under_test_is_the_models_verdict(on, repo, fault, open_store, bomb):
    """Under runsc such a bomb sometimes ended the verifier's sandbox (1 in 5):
    then the canary runs the tests of the starting copy, which end, and the
    failure is the model's."""
    original = (repo / "calc.py").read_text()
    outcome = run_hostile(fault, on, repo, call("write_file", path="calc.py", content=bomb + original))
    assert_models_verdict(outcome, open_store)


# -- a dead daemon against a hostile workspace -------------------------------

class CreateDroppingProxy(FlakyDockerProxy):
    """dockerd through a proxy that, after ``creates`` container creates,
    stops answering every later one (the connection is dropped): a daemon
    that can no longer start a container, for the verifier or its canary."""

    def __init__(self, path: Path, *, creates: int, drop: tuple[int, ...] = ()) -> None:
        super().__init__(path, refuse=0)
        self.allowed, self.creates, self.drop = creates, 0, drop

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        _pipe(client, upstream, before=self._drop_create)

    def _drop_create(self, data: bytes) -> None:
        line = data.split(b"\r\n", 1)[0]
        if b"/containers/create" in line:
            self.creates += 1
            if self.creates > self.allowed or self.creates in self.drop:
                raise OSError("create dropped: the daemon stopped answering")


PROTECTED_TO_DIR = bash("rm test_calc.py && mkdir test_calc.py && echo 'x = 1' > test_calc.py/mod.py")


def test_a_daemon_that_stops_answering_is_infra_error_with_both_failures(on, repo, fault, open_store, tmp_path):
    with CreateDroppingProxy(tmp_path / "docker.sock", creates=1) as proxy:
        outcome = run_hostile(fault, on.model_copy(update={"docker_host": proxy.url}), repo, bash("true"))
    # The model's sandbox, the early verifier's (dropped: the submit starts its
    # own), the submit's verifier's (dropped), the canary's (dropped).
    assert proxy.creates == 4
    assert outcome.result.verdict is Verdict.INFRA_ERROR, outcome.result.detail
    (error,) = open_store().events(outcome.run_id, "infra_error")
    assert error.data["type"] == "InfraFailure"
    assert "the verifier failed" in error.data["message"] and "the canary" in error.data["message"]
    assert error.data["context"]["failure"] and error.data["context"]["canary"]


def test_an_early_verifier_that_failed_leaves_the_verdict_to_the_submits_own(on, repo, fault, open_store, tmp_path):
    """The early verifier's create (the second) is dropped: the submit does
    the pre-pass itself, in a container of its own, and the fix passes."""
    with CreateDroppingProxy(tmp_path / "docker.sock", creates=10, drop=(2,)) as proxy:
        outcome = run_hostile(fault, on.model_copy(update={"docker_host": proxy.url}), repo, EDIT)
    assert proxy.creates == 3, proxy.creates
    assert outcome.result.verdict is Verdict.PASS, outcome.result.detail
    assert open_store().events(outcome.run_id, "infra_error") == []
    (observation,) = submits(open_store, outcome.run_id)
    assert observation.startswith("verifier PASSED") and "required tests passed" in observation, observation


def test_a_hostile_workspace_through_the_same_proxy_is_the_models_verdict(on, repo, fault, open_store, tmp_path):
    with CreateDroppingProxy(tmp_path / "docker.sock", creates=10) as proxy:
        outcome = run_hostile(fault, on.model_copy(update={"docker_host": proxy.url}), repo, PROTECTED_TO_DIR)
    observation = assert_models_verdict(outcome, open_store)
    if "the canary" in observation:  # caught in the verifier's sandbox: the canary was started, and ran
        assert proxy.creates == 3, proxy.creates  # the model's, the early verifier's (the submit's), the canary's
