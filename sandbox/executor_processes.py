"""The executor's children: how each is forked and drops to the sandbox
user, and how every process but init and the executor is ended after each
request. Runs INSIDE the container, one of the executor's modules
(sandbox/guest_loader.py; stdlib only).

The executor runs as root with only KILL, SETUID, SETGID and SETPCAP (under
gVisor also gVisor's SYS_ADMIN). Everything the model asks for runs as the
sandbox user in a forked child that first gives up every capability, so a
command can neither signal, trace nor read the executor (another uid, no
capability, no inherited descriptor; under gVisor, whose /proc shows another
uid more than Linux does, a PID namespace of its own:
sandbox/command_namespace.py).
"""

import ctypes
import errno
import os
import resource
import signal
import time

from sandbox.command_namespace import INIT, mount_own_proc, next_child_in_new_pid_namespace
from sandbox.command_seccomp import install_command_filter

ROOT = "/workspace"  # a command's directory unless it names one; every file op's path lies beneath it
UID = GID = 1000
PR_CAPBSET_DROP, PR_SET_CHILD_SUBREAPER, CAP_LAST = 24, 36, 63
REAP_LIMIT_S = 30.0
LIBC = ctypes.CDLL(None, use_errno=True)


class ExecutorArguments:
    """The host's arguments (sandbox/hardening.py says why each differs under
    gVisor): the policy's memory in bytes, 0 for none (each command's
    RLIMIT_AS, and the most the guest may use while a command runs: gVisor
    has no OOM killer, and a guest over the cgroup ends the whole sandbox);
    "pidns" to give each child a PID namespace and /proc of its own
    (sandbox/command_namespace.py); and the policy's processes, 0 for none
    (under gVisor a command that holds them all is a fork bomb whose churn of
    host tasks would end the sandbox's kernel: it is killed)."""

    def __init__(self, argv):
        self.address_space = int(argv[2]) if len(argv) > 2 else 0
        self.own_pid_namespaces = len(argv) > 3 and argv[3] == "pidns"
        self.processes = int(argv[4]) if len(argv) > 4 else 0


def adopt_orphans():
    """Orphans of commands come back to this process, which collects them."""
    LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


# -- dropping to the sandbox user --------------------------------------------

def become_sandbox_user(address_space):
    """In a forked child: no capability in any set, the sandbox uid and gid,
    and the policy's memory as its RLIMIT_AS (0: none; under gVisor, which
    has no OOM killer, this is what stops a huge read or allocation)."""
    with open("/proc/self/oom_score_adj", "w") as fh:  # the OOM killer takes commands first
        fh.write("1000")
    for cap in range(CAP_LAST + 1):
        if LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
            os._exit(120)
    os.setgroups([])
    os.setresgid(GID, GID, GID)
    os.setresuid(UID, UID, UID)  # clears the permitted, effective and ambient sets
    if address_space:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))


def fork_child(arguments):
    """os.fork, under gVisor into a new PID namespace. A failure ends the
    executor (the host then reports it broken): no child runs unhidden."""
    if arguments.own_pid_namespaces:
        next_child_in_new_pid_namespace(LIBC)
    return os.fork()


def spawn(argv, env, cwd, arguments):
    """Fork the command: its own session, the sandbox user, fds 0-2 only."""
    fds = [os.pipe(), os.pipe(), os.pipe()]
    pid = fork_child(arguments)
    if pid == 0:
        try:
            os.setsid()
            if arguments.own_pid_namespaces:
                mount_own_proc(LIBC)
                argv = [*INIT, *argv]
            become_sandbox_user(arguments.address_space)
            install_command_filter()
            os.dup2(fds[0][0], 0)
            os.dup2(fds[1][1], 1)
            os.dup2(fds[2][1], 2)
            os.closerange(3, 65536)
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        except BaseException as exc:
            try:
                os.write(2, f"escrow executor: cannot run {argv[0]}: {exc}\n".encode())
            finally:
                os._exit(127)
    os.close(fds[0][0])
    os.close(fds[1][1])
    os.close(fds[2][1])
    return pid, fds[0][1], fds[1][0], fds[2][0]


# -- reaping -----------------------------------------------------------------

def others():
    """Live processes besides init and this one."""
    found = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, me):
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def reap_all():
    """kill(-1) is atomic against fork (a process with a pending SIGKILL
    cannot fork), so one pass stops a fork bomb too; repeated until /proc
    shows nobody, collecting our own children's zombies on the way."""
    deadline = time.monotonic() + REAP_LIMIT_S
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        collect_children()
        left = others()
        if not left:
            return 0
        if time.monotonic() > deadline:
            return len(left)
        time.sleep(0.002)


REAPED: dict = {}  # pid -> wait status, for children collected while reaping


def collect_children():
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = raw


def child_status(pid):
    """The wait status of ``pid`` if it has ended (collected here or earlier)."""
    if pid in REAPED:
        return REAPED.pop(pid)
    try:
        done, raw = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return REAPED.pop(pid, None)
    return raw if done else None
