"""Nothing outlives its command. Each attack starts a process meant to survive
(a new session, a double fork, nohup, a killed wrapper, a fork bomb) that
would write ``late.txt`` after its command ended. The assertions are causal:
right after the command, ``ps`` in the container shows only the container's
init and the executor, and the late file never appears."""

from __future__ import annotations

import json
import time

import pytest

from orchestrator.toolset import TOOLS
from policies import Effect, decide, default_policy
from sandbox import Sandbox, ToolBox
from tests.sandbox.conftest import assert_hardened

pytestmark = pytest.mark.docker

POLICY = default_policy().model_copy(update={"resources": default_policy().resources.model_copy(
    update={"command_timeout_s": 8.0, "memory_mb": 256, "pids": 128, "workspace_mb": 64, "tmp_mb": 16})})
LATE_S = 2  # the survivor writes this long after it was started
PAST_HOST_DEADLINE_S = 9  # for a command that outlives its timeout: after the host's deadline (3 s + grace)


def survivor(delay: float = LATE_S) -> str:
    """Runs in the background, detached from the command's stdout, ignores
    TERM, and writes late.txt after ``delay`` seconds - after its command ended."""
    return (
        f"bash -c 'trap \"\" TERM HUP INT; sleep {delay}; echo late > /workspace/late.txt' </dev/null >/dev/null 2>&1"
    )


SURVIVOR = survivor()
# Kills every ancestor up to the exec's root: the command's shell, timeout, the wrapper.
KILL_ANCESTORS = ('a=""; p=$PPID; while [ "$p" -gt 1 ]; do a="$a $p"; p=$(ps -o ppid= -p "$p" | tr -d " "); done; '
                  'kill -9 $a $$')
ESCAPES = {
    "setsid-double-fork": f"(setsid {SURVIVOR} &) ; echo started",
    "nohup-disown": f"nohup {SURVIVOR} & disown; echo started",
    "kill-own-wrapper": f"setsid {SURVIVOR} & sleep 0.2; {KILL_ANCESTORS}",
    "kill-wrapper-ignore-term": f"trap '' TERM; (setsid {SURVIVOR} &); {KILL_ANCESTORS}",
    "kill-wrapper-then-sleep": (
        f"(setsid {survivor(PAST_HOST_DEADLINE_S)} &); kill -9 $(ps -o ppid= -p $PPID) $PPID; sleep 1000"
    ),
    "python-daemon": (
        'python3 -c "import os, time\nif os.fork(): os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\n'
        f"os.closerange(0, 3); time.sleep({LATE_S}); open('/workspace/late.txt', 'w').write('late')\""
    ),
}


def call(toolbox: ToolBox, tool: str, args: dict):
    parsed = TOOLS[tool].model_validate_json(json.dumps(args))
    assert decide(tool, parsed, toolbox.policy).effect is Effect.ALLOW
    return toolbox.execute(tool, parsed)


def survivors(sandbox: Sandbox) -> list[str]:
    """Processes in the container besides init, the executor and this ps, as
    a separate ``docker exec`` sees them (not as the executor reports)."""
    code, out = sandbox.container.exec_run(["ps", "-eo", "pid=,ppid=,args="], user=sandbox.spec.user)
    assert code == 0, out
    rows = [line.split(None, 2) for line in out.decode().splitlines()]
    return [args for pid, ppid, args in rows
            if pid not in ("1", str(sandbox.channel.pid)) and not args.startswith("ps -eo")]


def late_file_written(toolbox: ToolBox, delay: float = LATE_S) -> bool:
    # Past the survivor's delay (plus slack for a loaded host); causal: the
    # survivor would have written by now had it lived.
    time.sleep(delay + 3)
    return call(toolbox, "bash", {"command": "test -e late.txt && echo WRITTEN; rm -f late.txt; true"}).observation \
        .endswith("WRITTEN\n")


@pytest.fixture(scope="module")
def toolbox(docker_client, sandbox_image, sandbox_runtime, tmp_path_factory):
    repo = tmp_path_factory.mktemp("proc-repo")
    (repo / "a.txt").write_text("a\n")
    sandbox = Sandbox.start(docker_client, sandbox_image, POLICY, repo, runtime=sandbox_runtime)
    assert_hardened(docker_client, sandbox, POLICY)
    yield ToolBox(sandbox, POLICY, verifier_command="true")
    sandbox.close()


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_no_process_outlives_its_command(toolbox, name):
    call(toolbox, "bash", {"command": ESCAPES[name], "timeout_s": 3})
    assert survivors(toolbox.sandbox) == []
    assert not late_file_written(toolbox, PAST_HOST_DEADLINE_S if "then-sleep" in name else LATE_S)


@pytest.mark.parametrize("name", ["setsid-double-fork", "kill-own-wrapper"])
def test_no_process_outlives_a_file_tool_or_the_verifier(toolbox, name):
    """The survivor is started by one command; the next tools see none of it."""
    call(toolbox, "bash", {"command": ESCAPES[name], "timeout_s": 3})
    assert call(toolbox, "read_file", {"path": "a.txt"}).ok
    assert survivors(toolbox.sandbox) == []


def test_model_cannot_kill_the_main_process(toolbox):
    result = call(toolbox, "bash", {"command": "kill -9 -1; kill -9 $(cat /proc/1/task/1/children); echo rc=$?"})
    assert "rc=0" not in result.observation
    assert call(toolbox, "bash", {"command": "echo alive"}).observation.endswith("alive\n")


@pytest.mark.slow
@pytest.mark.parametrize("bomb", [
    "setsid bash -c ':(){ :|:& };:' </dev/null >/dev/null 2>&1 & sleep 1000",
    "python3 -c \"import os\nos.setsid()\nwhile True:\n    os.fork()\"",
])
def test_fork_bomb_under_timeout_leaves_nothing(docker_client, sandbox_image, sandbox_runtime, tmp_path, bomb):
    (tmp_path / "a.txt").write_text("a\n")
    with Sandbox.start(docker_client, sandbox_image, POLICY, tmp_path, runtime=sandbox_runtime) as sandbox:
        box = ToolBox(sandbox, POLICY)
        result = call(box, "bash", {"command": bomb, "timeout_s": 3})
        assert result.timed_out or result.exit_code != 0
        assert survivors(sandbox) == []
        assert call(box, "bash", {"command": "echo alive"}).observation.endswith("alive\n")
