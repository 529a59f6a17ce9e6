"""The persistent executor holds. Each test attacks one of its guarantees at
its mechanism: a command cannot signal, trace, read or write the executor
(another uid, no capability, no inherited descriptor, no /proc access); a
command's output cannot forge a frame; the host trusts no frame it cannot
parse, and an executor that dies or breaks its protocol ends in
``ExecutorBroken``, never in a silent success; a symlink swapped in while a
file tool runs cannot redirect it."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import threading
import time

import pytest

from orchestrator.toolset import TOOLS
from policies import Effect, decide, default_policy
from sandbox import ExecLimits, Sandbox, ToolBox
from sandbox.errors import ExecutorBroken
from sandbox.executor import FIND_EXECUTOR, ExecutorChannel
from sandbox.hardening import capability_mask
from tests.sandbox.conftest import assert_hardened

pytestmark = pytest.mark.docker

POLICY = default_policy()
SECRET_POLICY = POLICY.model_copy(update={"paths": POLICY.paths.model_copy(
    update={"deny": (*POLICY.paths.deny, "secrets", "secrets/**")})})
LIMITS = ExecLimits(timeout_s=20, stdout_cap=1 << 16, stderr_cap=1 << 14)


def call(toolbox: ToolBox, tool: str, args: dict):
    parsed = TOOLS[tool].model_validate_json(json.dumps(args))
    assert decide(tool, parsed, toolbox.policy).effect is Effect.ALLOW
    return toolbox.execute(tool, parsed)


@pytest.fixture(scope="module")
def box(docker_client, sandbox_image, sandbox_runtime, tmp_path_factory):
    repo = tmp_path_factory.mktemp("exec-repo")
    (repo / "a.txt").write_text("a\n")
    (repo / "secrets").mkdir()
    (repo / "secrets" / "key.txt").write_text("TOP-SECRET-KEY\n")
    sandbox = Sandbox.start(docker_client, sandbox_image, POLICY, repo, runtime=sandbox_runtime)
    assert_hardened(docker_client, sandbox, POLICY)
    yield ToolBox(sandbox, POLICY, verifier_command="true")
    sandbox.close()


def bash(box: ToolBox, command: str) -> str:
    result = call(box, "bash", {"command": command})
    return result.observation


def alive(box: ToolBox) -> bool:
    return box.sandbox.bash("echo alive", LIMITS).stdout.text() == "alive\n"


def as_root(box: ToolBox, command: str) -> str:
    """``command`` by docker exec as root: outside every command's namespaces."""
    code, out = box.sandbox.container.exec_run(["sh", "-c", command], user="0")
    assert code == 0, out
    return out.decode()


def test_the_executor_is_root_with_only_its_capabilities_and_commands_hold_none(box, sandbox_runtime):
    pid = box.sandbox.channel.pid
    executor = as_root(box, f"grep -E '^(Uid|CapEff|CapBnd):' /proc/{pid}/status")
    command = bash(box, "grep -E '^(Uid|Cap[A-Za-z]+):' /proc/self/status")
    assert "Uid:\t0\t0\t0\t0" in executor
    # KILL (5), SETGID (6), SETUID (7), SETPCAP (8), and under gVisor
    # SYS_ADMIN (21, gVisor's own, for the commands' PID namespaces): nothing else.
    caps = "00000000002001e0" if sandbox_runtime == "runsc" else "00000000000001e0"
    assert capability_mask(box.sandbox.spec.start_capabilities) == caps
    assert f"CapEff:\t{caps}" in executor and f"CapBnd:\t{caps}" in executor
    assert "Uid:\t1000\t1000\t1000\t1000" in command
    for line in [line for line in command.splitlines() if line.startswith("Cap")]:
        assert line.endswith("0000000000000000"), line


@pytest.mark.parametrize("attack", [
    "kill -9 {pid}", "kill -STOP {pid}", "kill -TERM {pid}", "kill -9 -1", "pkill -9 -f escrow-executor",
    "kill -9 1", "kill -9 -{pid}",
    "python3 -c 'import os,signal; [os.kill({pid}, s) for s in (signal.SIGKILL, signal.SIGSTOP, signal.SIGINT)]'",
])
def test_a_command_cannot_signal_the_executor(box, attack):
    pid = box.sandbox.channel.pid
    bash(box, attack.format(pid=pid))
    assert alive(box)
    assert box.sandbox.channel.pid == pid
    assert f"{pid} " in as_root(box, f"cat /proc/{pid}/stat")  # the same process, still there


PTRACE = ("python3 -c \"import ctypes,os,sys; libc=ctypes.CDLL(None, use_errno=True); "
          "r=libc.ptrace({request}, {pid}, 0, 0); print('ptrace', r, os.strerror(ctypes.get_errno()))\"")


@pytest.mark.parametrize("request_code", [16, 0x4206], ids=["attach", "seize"])
def test_a_command_cannot_trace_the_executor(box, request_code):
    pid = box.sandbox.channel.pid
    shown = bash(box, PTRACE.format(request=request_code, pid=pid))
    assert "ptrace -1 Operation not permitted" in shown
    assert alive(box)


@pytest.mark.parametrize("path", ["fd/0", "fd/1", "mem", "environ", "maps", "root/proc/self/status", "cwd/.",
                                  "syscall", "stack", "pagemap"])
def test_a_command_cannot_read_the_executors_proc_files(box, path):
    where = executor_seen_at(box)
    if where is None:
        return  # not in the command's /proc at all (test_no_process_a_command_sees_is_the_executor)
    shown = bash(box, f"head -c 64 {where}/{path} >/dev/null 2>&1 && echo READ; true")
    assert "READ" not in shown


# The executor's and init's entries by other names: gVisor's /proc reads
# "0<pid>" as <pid> (Linux refuses a leading zero); threads have their own.
# Under gVisor a command's /proc is its own namespace's, where the same
# numbers name its own processes: so what it reads is compared with what the
# executor's (or init's) entry holds, as root sees it from outside.
PROC_VIEWS = {"environ": "cat {} | base64 -w0", "maps": "cat {} | base64 -w0",
              "fd": "for f in {}/*; do readlink $f; done"}
ALIASES = ["{pid}", "0{pid}", "00{pid}", "{pid}/task/{pid}", "self/../{pid}", "thread-self/../../{pid}"]


# Init's maps are left out: under gVisor a command's pid 1 is its own tini,
# the same binary as the container's init.
REACHES = [(view, name) for view in sorted(PROC_VIEWS) for name in ALIASES] + [
    (view, alias.replace("{pid}", "1")) for view in ("environ", "fd") for alias in ALIASES]


@pytest.mark.parametrize(("view", "name"), REACHES)
def test_a_command_cannot_reach_the_executors_proc_by_another_name(box, view, name):
    pid = box.sandbox.channel.pid
    target = "1" if "{pid}" not in name else str(pid)
    held = as_root(box, PROC_VIEWS[view].format(f"/proc/{target}/{view}") + " 2>/dev/null; true")
    assert held.strip()
    reached = bash(box, PROC_VIEWS[view].format(f"/proc/{name.format(pid=pid)}/{view}") + " 2>/dev/null; true")
    assert held.strip() not in reached


@pytest.mark.parametrize("path", ["fd", "root/", "cwd/", "fdinfo", "map_files"])
def test_a_command_cannot_list_the_executors_proc_directories(box, path):
    where = executor_seen_at(box)
    if where is None:
        return  # not in the command's /proc at all (test_no_process_a_command_sees_is_the_executor)
    assert "LISTED" not in bash(box, f"ls {where}/{path} >/dev/null 2>&1 && echo LISTED; true")


def executors_found(box: ToolBox) -> list[int]:
    """The processes a command finds with the executor's argv."""
    found = box.sandbox.bash(FIND_EXECUTOR, LIMITS)
    return [int(line) for line in found.stdout.text().split()]


def executor_seen_at(box: ToolBox) -> str | None:
    """The executor's /proc directory as a command names it; None under
    gVisor, where the command's PID namespace holds only its own processes
    (and the executor's number may name one of them)."""
    pid = box.sandbox.channel.pid
    if pid in executors_found(box):
        return f"/proc/{pid}"
    assert box.sandbox.spec.runtime == "runsc"
    return None


def test_no_process_a_command_sees_is_the_executor_or_init(box, sandbox_runtime):
    """Under gVisor a command's /proc is its own PID namespace's; under runc
    it sees the container's (and Linux refuses it the entries tested above)."""
    pid = box.sandbox.channel.pid
    # Each process: its number, owner and program; and which of them have
    # the executor's argv.
    shown = bash(box, "for d in /proc/[0-9]*; do echo \"${d#/proc/} $(stat -c %u $d) "
                      "$(tr '\\0' '\\n' < $d/cmdline 2>/dev/null | head -n 1)\"; done")
    seen = {int(line.split()[0]): line for line in shown.splitlines() if line.split()[:1] and line.split()[0].isdigit()}
    executor = executors_found(box)
    root_owned = [line for line in seen.values() if line.split()[1] == "0"]
    if sandbox_runtime == "runsc":
        assert not executor and not root_owned, shown
        assert "docker-init" in seen[1]  # the namespace's own init, the sandbox user's
    else:
        assert executor == [pid] and root_owned and seen[pid] == f"{pid} 0 /usr/bin/python3"


@pytest.mark.parametrize("target", ["fd/0", "fd/1", "mem"])
def test_a_command_cannot_write_into_the_executor(box, target):
    pid = box.sandbox.channel.pid
    forged = "\\x52\\x00\\x00\\x00\\x10{\\\"op\\\":\\\"ping\\\"}"  # an R frame, as the host would send it
    shown = bash(box, f"printf '{forged}' > /proc/{pid}/{target} 2>/dev/null && echo WROTE; true")
    assert "WROTE" not in shown
    assert alive(box)


def test_a_command_inherits_no_descriptor_of_the_executor(box, docker_client):
    pid = box.sandbox.channel.pid
    # The executor's own descriptors, as root (its uid) sees them from outside the command.
    code, out = box.sandbox.container.exec_run(["sh", "-c", f"for f in /proc/{pid}/fd/*; do readlink $f; done"],
                                               user="0")
    assert code == 0, out
    executor_fds = {line for line in out.decode().splitlines() if line.startswith(("pipe:", "socket:", "host:"))}
    assert executor_fds
    shown = bash(box, "python3 -c \"import os; d='/proc/self/fd'; fds=sorted(int(f) for f in os.listdir(d)); "
                      "print(fds); [print(os.readlink(f'{d}/{f}')) for f in fds if f < 3]\"")
    listed = shown.split("\n", 2)[2]
    fds = json.loads(listed.splitlines()[0])
    assert fds == [0, 1, 2, 3]  # its standard streams, and the listing's own descriptor
    assert not executor_fds & set(listed.splitlines()[1:])


def test_command_output_cannot_forge_a_frame(box):
    """A command prints the executor's framing for a successful result (and
    Docker's framing around it), then fails: the host reads it as stdout."""
    result = json.dumps({"id": 99, "exit_code": 0, "ending": None, "left": 0, "duration_s": 0}).encode()
    frame = struct.pack(">BI", ord("D"), len(result)) + result
    docker_frame = struct.pack(">BxxxI", 1, len(frame)) + frame
    forged = "".join(f"\\x{b:02x}" for b in docker_frame + frame)
    outcome = box.sandbox.bash(f"printf '{forged}'; printf '{forged}' >&2; exit 3", LIMITS)
    assert outcome.exit_code == 3
    assert b'"exit_code": 0' in (docker_frame + frame) and outcome.stdout.total_bytes == len(docker_frame + frame)
    assert outcome.stderr.total_bytes == len(docker_frame + frame)
    assert alive(box)


def test_a_flood_is_cut_and_the_executor_stays_responsive(box):
    limits = ExecLimits(timeout_s=20, stdout_cap=1024, stderr_cap=1024)
    outcome = box.sandbox.bash("yes FLOODFLOODFLOOD; echo never", limits)
    assert outcome.flooded and outcome.stdout.total_bytes <= 4096 * 2048 + (1 << 16)
    assert box.sandbox.processes() == []
    assert alive(box)


def test_the_wrapper_killing_command_of_the_issue_leaves_nothing_running(box):
    command = "setsid sh -c 'sleep 2; echo LATE >> f.py' & sleep 0.3; kill -9 $(ps -o ppid= -p $PPID); kill -9 $PPID"
    bash(box, command)
    assert box.sandbox.processes() == []  # checked by the host with its own docker exec, not by the executor
    # Causal: had the setsid child lived, f.py would hold LATE by now.
    assert "LATE" not in bash(box, "sleep 3; cat f.py 2>/dev/null; rm -f f.py; true")


def kill_executor(sandbox: Sandbox) -> None:
    """``kill -9`` of the executor from a detached exec: an exec attached to
    a container whose main process dies may never return (under gVisor it
    held a test for an hour), and the test's real check is what the tool
    calls that follow do."""
    sandbox.container.exec_run(["kill", "-9", str(sandbox.channel.pid)], user="0", detach=True)


def stopped(sandbox: Sandbox, limit_s: float = 60.0) -> None:
    """Wait until the container has stopped: its executor, the container's
    main process, is gone."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        sandbox.container.reload()
        if sandbox.container.status != "running":
            return
        time.sleep(0.1)
    raise AssertionError(f"the container still runs {limit_s:.0f} s after its executor was killed")


def test_an_executor_killed_from_outside_is_broken_for_good(docker_client, sandbox_image, sandbox_runtime, tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    with Sandbox.start(docker_client, sandbox_image, POLICY, tmp_path, runtime=sandbox_runtime) as sandbox:
        killer = threading.Timer(0.5, kill_executor, args=(sandbox,))
        killer.start()
        with pytest.raises(ExecutorBroken, match="stream ended|did not answer|broke"):
            sandbox.bash("sleep 5; echo done", LIMITS)
        killer.join()
        with pytest.raises(ExecutorBroken, match="unusable"):
            sandbox.bash("echo again", LIMITS)


def test_an_executor_killed_mid_run_ends_the_tool_call_with_an_error_not_a_result(docker_client, sandbox_image,
                                                                                  sandbox_runtime, tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    with Sandbox.start(docker_client, sandbox_image, POLICY, tmp_path, runtime=sandbox_runtime) as sandbox:
        toolbox = ToolBox(sandbox, POLICY)
        kill_executor(sandbox)
        stopped(sandbox)
        for tool, args in [("read_file", {"path": "a.txt"}), ("bash", {"command": "true"})]:
            with pytest.raises(ExecutorBroken):
                call(toolbox, tool, args)


# -- the host's parser, fed bytes that are not the protocol ---------------------

def docker_frames(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">BxxxI", 1, len(p)) + p for p in payloads)


def frame(kind: str, payload: bytes) -> bytes:
    return struct.pack(">BI", ord(kind), len(payload)) + payload


HELLO = frame("H", b'{"pid": 7, "uid": 0}')


@pytest.mark.parametrize("reply, why", [
    (frame("Z", b"x"), "unknown frame kind"),
    (struct.pack(">BI", ord("O"), 1 << 20), "over its cap"),
    (struct.pack(">BI", ord("D"), 1 << 30), "over its cap"),
    (frame("D", b"not json"), "not JSON"),
    (frame("D", b"[1, 2]"), "not an object"),
    (frame("D", b'{"id": 41, "exit_code": 0}'), "result for request 41"),
    (frame("H", b'{"pid": 7}'), "unexpected 'H' frame"),
    (frame("P", b'{"resolved": 5}'), "not a string"),
    (b"", "stream ended"),
], ids=["kind", "output-cap", "json-cap", "not-json", "not-object", "wrong-id", "stray-hello", "bad-path", "eof"])
def test_the_host_trusts_no_frame_it_cannot_parse(reply, why):
    ours, theirs = socket.socketpair()
    channel = ExecutorChannel(ours, "c", "r")
    theirs.sendall(docker_frames(HELLO))
    assert channel.hello(timeout_s=5)["pid"] == 7
    if reply:
        theirs.sendall(docker_frames(reply))
    else:
        theirs.shutdown(socket.SHUT_WR)
    with pytest.raises(ExecutorBroken, match=why):
        channel.request({"op": "exec"}, timeout_s=5, on_resolved=lambda path: True)
    with pytest.raises(ExecutorBroken, match="unusable"):
        channel.request({"op": "ping"}, timeout_s=5)
    theirs.close()
    channel.close()


def test_a_silent_executor_fails_at_the_deadline_not_never():
    ours, theirs = socket.socketpair()
    channel = ExecutorChannel(ours, "c", "r")
    theirs.sendall(docker_frames(HELLO))
    channel.hello(timeout_s=5)
    import sandbox.executor as executor_module
    grace = executor_module.GRACE_S
    executor_module.GRACE_S = 0.2  # the deadline is the request's timeout plus this grace
    try:
        with pytest.raises(ExecutorBroken, match="did not answer in time"):
            channel.request({"op": "exec"}, timeout_s=0.1)
    finally:
        executor_module.GRACE_S = grace
    theirs.close()
    channel.close()


# -- a symlink swapped in while file tools run ---------------------------------

SWAPPER = ("cd /workspace; mkdir -p real; echo PUBLIC > real/f.txt; "
           "while true; do ln -sfn {target} d.tmp; mv -T d.tmp d; ln -sfn real d.tmp; mv -T d.tmp d; done")


@pytest.mark.parametrize("target", ["secrets", "/etc", "../../../etc", ".git"], ids=["denied", "abs-out", "rel-out",
                                                                                      "git"])
def test_a_racing_symlink_swap_never_redirects_a_file_tool(docker_client, sandbox_image, sandbox_runtime,
        tmp_path, target):
    """A process of the sandbox user (started outside the executor, so that
    it lives on through every file op) swaps ``d`` between a link to the
    allowed ``real`` and a link to a denied or outside place, as fast as it
    can, while read_file, write_file and edit_file run on ``d/f.txt``."""
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "f.txt").write_text("TOP-SECRET\n")
    with Sandbox.start(docker_client, sandbox_image, SECRET_POLICY, tmp_path, runtime=sandbox_runtime) as sandbox:
        toolbox = ToolBox(sandbox, SECRET_POLICY)
        racer = subprocess.Popen(["docker", "exec", "-u", sandbox.spec.user, sandbox.container.id, "bash", "-c",
                                  SWAPPER.format(target=target)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            # The race is on once d exists (before, a write would make d a directory and end it).
            assert sandbox.container.exec_run(["bash", "-c", "for i in $(seq 500); do [ -L /workspace/d ] && exit 0; "
                                               "sleep 0.01; done; exit 1"], user=sandbox.spec.user)[0] == 0
            outcomes = {"allowed": 0, "refused": 0}
            for i in range(60):
                read = call(toolbox, "read_file", {"path": "d/f.txt"})
                assert "TOP-SECRET" not in read.observation and "root:" not in read.observation
                outcomes["allowed" if read.ok else "refused"] += 1
                if read.ok:
                    assert read.resolved_path == "real/f.txt"
                wrote = call(toolbox, "write_file", {"path": "d/f.txt", "content": f"PUBLIC {i}\n"})
                assert not wrote.ok or wrote.resolved_path == "real/f.txt"
                call(toolbox, "edit_file", {"path": "d/f.txt", "old": "PUBLIC", "new": "PUBLIC"})
        finally:
            racer.kill()
            racer.wait()
        assert outcomes["allowed"] > 0  # the race ran both ways; an always-refused tool proves nothing
        assert sandbox.bash("cat secrets/f.txt", LIMITS).stdout.text() == "TOP-SECRET\n"


def test_a_command_that_writes_before_it_reads_its_stdin_does_not_block_the_channel(box):
    """4 MB of output before it reads 20 MiB of input: with the host sending
    all stdin before reading, both ends would wait on each other."""
    limits = ExecLimits(timeout_s=60, stdout_cap=1 << 16, stderr_cap=1 << 12)
    outcome = box.sandbox.exec(["/bin/bash", "-c", "head -c 4000000 /dev/zero | base64 -w0; echo; wc -c"], limits,
                               stdin=[b"x" * (1 << 20)] * 20)
    assert outcome.exit_code == 0 and outcome.stdout.tail.strip().endswith("20971520")
    assert alive(box)
