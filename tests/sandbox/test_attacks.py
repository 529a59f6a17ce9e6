"""Adversarial suite against the real container. Every attack goes the way
the loop sends it: through the loop's own verification perimeter
(``orchestrator.perimeter.check_candidate`` over the live ``SandboxTools`` adapter's
argument models and ACL) and then ``ToolBox.execute``, and must end blocked
or contained: a parse or schema error, an ACL denial, a refused file op, or a
command whose effect stays inside the sandbox. No output of any attack
contains the host canary (env var + file), which stays unchanged, and no
container outlives its sandbox."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from orchestrator.candidate import CandidateState, stage
from orchestrator.contract import ToolCall
from orchestrator.perimeter import acl_of, check_candidate
from orchestrator.toolset import ToolArgs
from policies import default_policy
from sandbox import Sandbox, ToolBox
from sandbox.hardening import LABEL_RUN
from sandbox.loop_tools import SandboxTools
from tests.sandbox.conftest import CANARY_ENV, CANARY_SECRET, assert_hardened

pytestmark = pytest.mark.docker

POLICY = default_policy().model_copy(update={"resources": default_policy().resources.model_copy(
    update={"command_timeout_s": 8.0, "memory_mb": 256, "pids": 128, "workspace_mb": 64, "tmp_mb": 16})})


def _no_canary(text: str | None) -> None:
    assert CANARY_SECRET not in (text or ""), "the host canary leaked into an observation"


def call(toolbox: ToolBox, tool: str, args: dict | str) -> tuple[str, object]:
    """One model tool call as the loop handles it: the perimeter's layer that
    rejected it ("parse", "schema", or "acl" for the policy layer) with the
    PerimeterResult, or "ran" with the ToolResult."""
    text = args if isinstance(args, str) else json.dumps(args)
    candidate, _ = stage(0, ToolCall(id="a", name=tool, arguments=text))
    tools = SandboxTools(toolbox, toolbox.policy)
    checked = check_candidate(candidate, tools.arg_models(), acl_of(toolbox.policy))
    if not checked.committed:
        assert checked.candidate.state is CandidateState.REJECTED
        _no_canary(checked.error)
        return ("acl" if checked.layer == "policy" else checked.layer), checked
    assert isinstance(checked.args, ToolArgs)  # committed: validated against the tool's model
    result = toolbox.execute(tool, checked.args)
    _no_canary(result.observation)
    return "ran", result


def containers_of(docker_client, run_id: str) -> list[str]:
    return [c.id for c in docker_client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})]


@pytest.fixture(scope="module")
def canary(tmp_path_factory):
    directory = tmp_path_factory.mktemp("canary")
    secret = directory / "secret.txt"
    secret.write_text(CANARY_SECRET)
    os.environ[CANARY_ENV] = CANARY_SECRET
    digest = hashlib.sha256(secret.read_bytes()).hexdigest()
    yield secret
    os.environ.pop(CANARY_ENV, None)
    assert hashlib.sha256(secret.read_bytes()).hexdigest() == digest


@pytest.fixture(scope="module")
def attack_repo(tmp_path_factory, canary) -> Path:
    repo = tmp_path_factory.mktemp("attack-repo")
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "twice.txt").write_text("x\nx\n")
    os.symlink(canary, repo / "host_secret_link")  # a link in the user's repo to a host secret
    return repo


def _start(docker_client, sandbox_image, sandbox_runtime, repo: Path) -> Sandbox:
    sandbox = Sandbox.start(docker_client, sandbox_image, POLICY, repo, runtime=sandbox_runtime)
    assert_hardened(docker_client, sandbox, POLICY)
    return sandbox


@pytest.fixture(scope="module")
def toolbox(docker_client, sandbox_image, sandbox_runtime, attack_repo):
    sandbox = _start(docker_client, sandbox_image, sandbox_runtime, attack_repo)
    yield ToolBox(sandbox, POLICY, verifier_command="true")
    sandbox.close()


def bash(toolbox: ToolBox, command: str, timeout_s: float | None = None):
    kind, result = call(toolbox, "bash", {"command": command, **({"timeout_s": timeout_s} if timeout_s else {})})
    assert kind == "ran"
    return result


# --- layer 1-3: schema and ACL (no Docker call happens) ---------------------------------------
DENIED = [
    ("read_file", {"path": "../../etc/passwd"}),
    ("read_file", {"path": "/etc/passwd"}),
    ("read_file", {"path": "/workspace/../etc/shadow"}),
    ("read_file", {"path": "//etc/passwd"}),
    ("write_file", {"path": "../outside.txt", "content": "x"}),
    ("write_file", {"path": "/tmp/x", "content": "x"}),
    ("list_files", {"path": ".."}),
    ("edit_file", {"path": "a/../../etc/hosts", "old": "a", "new": "b"}),
    ("read_file", {"path": "calc.py\x00.txt"}),
    ("write_file", {"path": "ok\x00/../../x", "content": "x"}),
    ("write_file", {"path": ".git/config", "content": "[core]\n\tfsmonitor = evil\n"}),
    ("edit_file", {"path": ".git/HEAD", "old": "ref", "new": "x"}),
]
SCHEMA = [  # (tool, arguments, the perimeter layer that rejects them)
    ("bash", {"command": "echo hi\x00rm -rf /"}, "schema"),
    ("read_file", {"path": "calc.py", "follow": True}, "schema"),
    ("write_file", {"path": "x"}, "schema"),
    ("rm_rf", {"path": "."}, "schema"),
    ("bash", '{"command": "ls"', "parse"),
    ("bash", '["ls"]', "parse"),
    ("bash", "[" * 100_000, "parse"),
]


@pytest.mark.parametrize("tool,args", DENIED, ids=[f"acl-{i}" for i in range(len(DENIED))])
def test_acl_denies_before_docker(toolbox, tool, args):
    kind, checked = call(toolbox, tool, args)
    assert kind == "acl" and checked.decision.effect == "deny"
    assert checked.error.startswith(f"denied by policy rule {checked.decision.rule}")


@pytest.mark.parametrize("tool,args,layer", SCHEMA, ids=[f"schema-{i}" for i in range(len(SCHEMA))])
def test_schema_rejects(toolbox, tool, args, layer):
    kind, checked = call(toolbox, tool, args)
    assert kind == layer and checked.decision is None  # rejected before the ACL is asked


def test_absolute_host_canary_path_denied(toolbox, canary):
    kind, checked = call(toolbox, "read_file", {"path": str(canary)})
    assert kind == "acl" and checked.decision.effect == "deny"


# --- layer 4: dynamic, inside the container ---------------------------------------------------
SYMLINK_PLANTS = [
    ("ln -sfn /etc/passwd p1", "read_file", {"path": "p1"}),
    ("ln -sfn / rootl", "read_file", {"path": "rootl/etc/hostname"}),
    ("ln -sfn /etc evil_dir", "write_file", {"path": "evil_dir/pwn", "content": "x"}),
    ("ln -sfn .. up", "list_files", {"path": "up"}),
    ("ln -sfn /tmp tlink", "write_file", {"path": "tlink/pwn", "content": "x"}),
    ("ln -sfn /etc/hosts hl", "edit_file", {"path": "hl", "old": "localhost", "new": "evil"}),
    ("ln -sfn loop2 loop1; ln -sfn loop1 loop2", "read_file", {"path": "loop1"}),
    ("mkdir -p d && ln -sfn ../../../../etc d/deep", "read_file", {"path": "d/deep/passwd"}),
]


@pytest.mark.parametrize("plant,tool,args", SYMLINK_PLANTS, ids=[f"symlink-{i}" for i in range(len(SYMLINK_PLANTS))])
def test_planted_symlink_refused_inside(toolbox, plant, tool, args):
    assert bash(toolbox, plant).ok
    kind, result = call(toolbox, tool, args)
    assert kind == "ran" and not result.ok
    assert "root:" not in result.observation


def test_repo_symlink_to_host_secret_stays_dangling(toolbox):
    kind, result = call(toolbox, "read_file", {"path": "host_secret_link"})
    assert kind == "ran" and not result.ok
    assert CANARY_SECRET not in bash(toolbox, "cat host_secret_link; true").observation


CONTAINED = {  # command -> marker that would prove an escape
    "curl": ("curl -sS -m 3 http://example.com && echo ESCAPED", "ESCAPED"),
    "python-urllib": (
        "python3 -c \"import urllib.request as u; u.urlopen('http://93.184.215.14', timeout=3); print('ESC'+'APED')\"",
        "ESCAPED",
    ),
    "python-socket": (
        "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 3); print('ESC'+'APED')\"",
        "ESCAPED",
    ),
    "docker-gateway": (
        "python3 -c \"import socket; socket.create_connection(('172.17.0.1', 2375), 3); print('ESC'+'APED')\"",
        "ESCAPED",
    ),
    "udp": (
        "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
        "s.sendto(b'x', ('8.8.8.8', 53)); print('ESC'+'APED')\"",
        "ESCAPED",
    ),
    "dns": (
        "getent hosts example.com && echo ESCAPED; "
        "python3 -c \"import socket; socket.gethostbyname('example.com'); print('ESC'+'APED')\"",
        "ESCAPED",
    ),
    "dev-tcp": ("exec 3<>/dev/tcp/1.1.1.1/80 && echo ESCAPED", "ESCAPED"),
    "env": ("env; cat /proc/1/environ /proc/self/environ | tr '\\0' '\\n'", CANARY_SECRET),
    "host-file": (
        "cat /tmp/pytest-of-*/*/canary*/secret.txt 2>&1; find / -name secret.txt -not -path '/proc/*' 2>/dev/null",
        CANARY_SECRET,
    ),
    "docker-socket": ("ls -la /var/run/docker.sock /run/docker.sock 2>/dev/null && echo ESCAPED", "ESCAPED"),
    "write-root": ("touch /etc/pwned && echo ESCAPED; echo x > /usr/bin/pwned && echo ESCAPED", "ESCAPED"),
    "write-home": ("touch /home/agent/x && echo ESCAPED", "ESCAPED"),
    "mount": (
        "mount -t tmpfs none /mnt && echo ESCAPED; /usr/bin/mount --bind /workspace /mnt && echo ESCAPED",
        "ESCAPED",
    ),
    "setuid": ("python3 -c \"import os; os.setuid(0); print('ESC'+'APED')\"", "ESCAPED"),
    "su": ("echo '' | su -c 'echo ESCAPED' root", "ESCAPED"),
    "unshare": ("unshare -r id && echo ESCAPED; unshare -m true && echo ESCAPED", "ESCAPED"),
    "chroot": ("chroot / true && echo ESCAPED", "ESCAPED"),
    "sysctl": ("echo 1 > /proc/sys/kernel/sysrq && echo ESCAPED", "ESCAPED"),
    # Root runs init and the executor only, and no process of the sandbox user holds a capability.
    # No root process but init and the executor (under gVisor a command sees neither).
    "root-process": ("ps -eo user=,pid=,args= | awk '$1==\"root\" && $2!=1 && $0 !~ / escrow-executor [0-9]+ /' "
                     "| grep -q . && echo ESCAPED", "ESCAPED"),
    "capable-process": ("grep -l '^Uid:.*1000' /proc/[0-9]*/status 2>/dev/null | xargs grep -h -E "
                        "'^Cap(Eff|Prm|Inh|Amb):' | grep -v 0000000000000000 && echo ESCAPED", "ESCAPED"),
    "caps": ("grep -E 'Cap(Eff|Prm|Bnd):' /proc/self/status | grep -v 0000000000000000 && echo ESCAPED", "ESCAPED"),
}


@pytest.mark.parametrize("name", sorted(CONTAINED))
def test_contained_commands(toolbox, name):
    command, marker = CONTAINED[name]
    result = bash(toolbox, command)
    assert marker not in result.observation
    assert bash(toolbox, "echo alive").observation.endswith("alive\n")


# No namespace by any path: the command filter (sandbox/command_seccomp.py),
# which matters under gVisor, whose kernel gives the sandbox user a user
# namespace. Each prints how it was refused, so a broken probe cannot pass.
NAMESPACE_PROBES = {
    "unshare-newuser": ("print(c.syscall(272, 0x10000000), ctypes.get_errno())", "-1 1"),
    "unshare-newns": ("print(c.syscall(272, 0x00020000), ctypes.get_errno())", "-1 1"),
    "clone-newuser": ("pid = c.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)\nif pid == 0: os._exit(0)\n"
                      "print(pid, ctypes.get_errno())", "-1 1"),
    "clone-newpid": ("pid = c.syscall(56, 0x20000000 | 17, 0, 0, 0, 0)\nif pid == 0: os._exit(0)\n"
                     "print(pid, ctypes.get_errno())", "-1 1"),
    "clone3": ("print(c.syscall(435, 0, 0), ctypes.get_errno())", "-1 38"),  # ENOSYS: glibc falls back to clone
}


@pytest.mark.parametrize("name", sorted(NAMESPACE_PROBES))
def test_no_namespace_by_any_path(toolbox, name):
    probe, refused = NAMESPACE_PROBES[name]
    code = f"import ctypes, os\nc = ctypes.CDLL(None, use_errno=True)\n{probe}"
    assert bash(toolbox, f"python3 -c {shlex.quote(code)}").observation.endswith(f"]\n{refused}\n")


def test_the_filter_refuses_only_namespaces(toolbox):
    # A plain fork, threads and select(2) (bash's read -t) still work.
    out = bash(toolbox, "echo hi | { read -t 5 x && echo \"read $x\"; }; python3 -c \"import os, threading; "
                        "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join(); "
                        "pid = os.fork(); os._exit(0) if pid == 0 else print('fork', os.waitpid(pid, 0)[1])\"")
    assert out.observation.endswith("]\nread hi\nthread\nfork 0\n")


METACHAR_PATHS = ["$(touch /workspace/PWNED).txt", "`touch PWNED`", "x; touch PWNED", "a|touch PWNED", "*"]


@pytest.mark.parametrize("path", METACHAR_PATHS, ids=[f"metachar-{i}" for i in range(len(METACHAR_PATHS))])
def test_metacharacters_in_file_tools_stay_literal(toolbox, path):
    kind, result = call(toolbox, "write_file", {"path": path, "content": "$(id) `id`"})
    assert kind == "ran" and result.ok
    kind, read = call(toolbox, "read_file", {"path": path})
    assert kind == "ran" and read.observation == "$(id) `id`"
    assert "PWNED" not in bash(toolbox, "test -e PWNED && echo PWNED; true").observation


def test_edit_anchor_missing_or_ambiguous(toolbox):
    assert "not found" in call(toolbox, "edit_file", {"path": "calc.py", "old": "zzz", "new": "y"})[1].observation
    assert "2 times" in call(toolbox, "edit_file", {"path": "twice.txt", "old": "x", "new": "y"})[1].observation


def test_output_floods_are_capped(toolbox):
    cap = POLICY.resources.stdout_cap_bytes
    for command in ("yes", "head -c 30000000 /dev/urandom", "yes 1>&2"):
        result = bash(toolbox, command)
        assert len(result.observation) < 3 * (cap + POLICY.resources.stderr_cap_bytes)
        stream = result.stderr if "1>&2" in command else result.stdout
        assert stream.truncated and stream.total_bytes > cap and len(stream.sha256) == 64
    assert bash(toolbox, "echo alive").ok


def test_disk_fill_hits_tmpfs_limits(toolbox):
    for target in ("/workspace/fill", "/tmp/fill"):
        result = bash(toolbox, f"dd if=/dev/zero of={target} bs=1M count=400 2>&1; rm -f {target}")
        assert "No space left on device" in result.observation
    assert bash(toolbox, "echo alive").ok


@pytest.mark.parametrize("command", [
    "sleep 1000",
    "trap '' TERM; sleep 1000",
    "setsid sleep 1000 & sleep 1000",
    "nohup setsid bash -c 'sleep 1000' >/dev/null 2>&1 & disown; sleep 1000",
])
def test_sleep_past_timeout_kills_the_tree(toolbox, command):
    result = bash(toolbox, command, timeout_s=1.5)
    assert result.timed_out and result.duration_s < 8
    assert "sleep 1000" not in bash(toolbox, "ps -eo args").observation


def test_background_process_does_not_outlive_its_command(toolbox):
    assert bash(toolbox, "setsid sleep 1000 >/dev/null 2>&1 & echo started").ok
    assert "sleep 1000" not in bash(toolbox, "ps -eo args").observation


# --- bombs get their own containers ------------------------------------------------------------
BOMBS = {
    "bash-fork-bomb": ":(){ :|:& };:",
    "python-fork-bomb": "python3 -c \"import os\nwhile True:\n    os.fork()\"",
    "python-memory-bomb": "python3 -c \"x = bytearray(4 * 1024**3)\"",
    "bash-memory-bomb": "x=aaaaaaaa; while true; do x=$x$x; done",
    # Each process under the sandbox's memory, together well over it.
    "memory-in-many-processes": "for i in $(seq 12); do python3 -c \"x = bytearray(100 * 2**20); "
                                "import time; time.sleep(3)\" & done; wait",
    "ptrace-init": "python3 -c \"import ctypes; l = ctypes.CDLL(None); print(l.ptrace(16, 1, 0, 0))\"; sleep 0.5",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BOMBS))
def test_bombs_are_contained(docker_client, sandbox_image, sandbox_runtime, attack_repo, name):
    sandbox = _start(docker_client, sandbox_image, sandbox_runtime, attack_repo)
    try:
        box = ToolBox(sandbox, POLICY)
        result = bash(box, BOMBS[name], timeout_s=4)
        assert result.duration_s < 15
        alive = bash(box, "echo alive; ps -e --no-headers | wc -l")
        assert alive.ok and "alive" in alive.observation
    finally:
        sandbox.close()
    assert containers_of(docker_client, sandbox.run_id) == []


def _init_identity(docker_client, box: ToolBox) -> tuple[str, str, int]:
    """The container's start and restart count, and PID 1's start time: all
    unchanged only if init (and so the container) survived."""
    state = docker_client.api.inspect_container(box.sandbox.container.id)
    # As root by docker exec: under gVisor a command's pid 1 is its own init.
    code, out = box.sandbox.container.exec_run(["cut", "-d", " ", "-f22", "/proc/1/stat"], user="0")
    assert code == 0, out
    started = out.decode().strip()
    return state["State"]["StartedAt"], started, state["RestartCount"]


# Signals at init, and at every process the agent's user may signal. A shell
# that kills init is killed with it, so the proof is init's identity after.
# Init and the main process run as another uid than the agent's, so none of
# these reaches them (TERM/INT/HUP forwarded by docker-init, kill -1 at all).
INIT_KILLS = ["kill -9 1", "kill -STOP 1", "kill -TERM 1", "kill -INT 1", "kill -HUP 1", "kill -9 -1", "kill -TERM -1"]


@pytest.mark.slow
@pytest.mark.parametrize("command", INIT_KILLS)
def test_init_survives_the_agent_killing_it(docker_client, sandbox_image, sandbox_runtime, attack_repo, command):
    # its own: a success would spoil a shared one
    sandbox = _start(docker_client, sandbox_image, sandbox_runtime, attack_repo)
    try:
        box = ToolBox(sandbox, POLICY)
        before = _init_identity(docker_client, box)
        call(box, "bash", {"command": f"{command}; sleep 0.2; echo done"})
        assert docker_client.api.inspect_container(sandbox.container.id)["State"]["Running"] is True
        assert _init_identity(docker_client, box) == before
        assert bash(box, "echo alive").observation.endswith("alive\n")
    finally:
        sandbox.close()


def test_closing_a_sandbox_leaves_no_container(docker_client, sandbox_image, sandbox_runtime, attack_repo):
    sandbox = _start(docker_client, sandbox_image, sandbox_runtime, attack_repo)
    try:
        bash(ToolBox(sandbox, POLICY), "setsid sleep 1000 >/dev/null 2>&1 & echo started")
        assert containers_of(docker_client, sandbox.run_id) == [sandbox.container.id]
    finally:
        sandbox.close()
    assert containers_of(docker_client, sandbox.run_id) == []


def test_attack_count():
    """The suite really runs at least 40 attacks: counted from what pytest
    collects (not from the tables), and every table entry became a test."""
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", __file__],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # One attack per table entry, however many runtimes each runs under.
    ids = {re.sub(r"\[(runc|runsc)-", "[", line) for line in collected.stdout.splitlines() if "::test_" in line}
    per_test = Counter(i.split("::", 1)[1].split("[", 1)[0] for i in ids)
    tables = {"test_acl_denies_before_docker": DENIED, "test_schema_rejects": SCHEMA,
              "test_planted_symlink_refused_inside": SYMLINK_PLANTS, "test_contained_commands": CONTAINED,
              "test_metacharacters_in_file_tools_stay_literal": METACHAR_PATHS, "test_bombs_are_contained": BOMBS}
    for name, table in tables.items():
        assert per_test[name] == len(table), f"{name}: {per_test[name]} collected for {len(table)} table entries"
    attacks = sum(
        n for name, n in per_test.items() if name not in ("test_attack_count", "test_zz_no_leak_and_no_orphans")
    )
    assert attacks >= 40, per_test
