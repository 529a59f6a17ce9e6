"""Under gVisor: each child of the executor in a PID namespace of its own,
with its own /proc. Runs INSIDE the container, one of the executor's
modules (sandbox/guest_loader.py; stdlib only).

Linux refuses a process of another uid the ``fd`` and ``fdinfo`` listings
and the ``environ`` and ``maps`` of a root process; gVisor's kernel (runsc
0.0~20240729 and 20221219) lets the sandbox user read them, and a mount laid
over ``/proc/<pid>`` is no fix (``/proc/0<pid>`` names the same process
there). So under runsc the executor, which holds gVisor's CAP_SYS_ADMIN for
this alone, gives each child a new PID namespace (``unshare(CLONE_NEWPID)``
before every fork: the namespace ends with its first process, and a later
fork into it would fail), and the child, before it gives up its
capabilities, mounts a /proc of that namespace in a mount namespace of its
own. A command then sees itself, its init and its own processes, never the
executor or the container's init. ``INIT`` (docker's tini, in every sandbox
container) runs as the namespace's pid 1 so the command is not: a pid 1
ignores the signals it has no handler for, so the host's TERM on a timeout
would not reach it.
"""

import ctypes
import os

CLONE_NEWNS, CLONE_NEWPID = 0x20000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 0x40000
INIT = ("/sbin/docker-init", "--")


class NamespaceFailed(Exception):
    pass


def _call(libc, result, what):
    if result != 0:
        raise NamespaceFailed(f"{what}: {os.strerror(ctypes.get_errno())}")


def next_child_in_new_pid_namespace(libc):
    """In the executor, just before it forks."""
    _call(libc, libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")


def mount_own_proc(libc):
    """In the forked child, while it still holds CAP_SYS_ADMIN."""
    _call(libc, libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _call(libc, libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
    _call(libc, libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mounting /proc")
