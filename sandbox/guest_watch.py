"""Under gVisor: the guest's memory and processes, read while a command runs.
Runs INSIDE the container, one of the executor's modules
(sandbox/guest_loader.py; stdlib only).

Under runc the cgroup holds the guest: its OOM killer takes one process and
the pids limit refuses a fork. gVisor has neither in the guest's terms: a
guest over the cgroup's memory ends the whole sandbox (exit 137), and a fork
bomb's churn of host tasks can panic the sandbox's kernel (exit 2). So the
executor reads the guest's own account every few milliseconds while a
command runs and, at the policy's memory or processes, kills the command's
processes as the OOM killer would, well before the cgroup (which adds
gVisor's kernel share) is reached.
"""

import os


def guest_memory_used():
    """Bytes the guest uses, processes, page cache and tmpfs together: under
    gVisor /proc/meminfo is the sandbox kernel's own account (MemTotal is the
    container's cgroup limit); None where it cannot be read."""
    try:
        with open("/proc/meminfo", "rb") as fh:
            fields = dict(line.split(b":", 1) for line in fh.read().splitlines() if b":" in line)
        return (int(fields[b"MemTotal"].split()[0]) - int(fields[b"MemAvailable"].split()[0])) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        return None


def over_memory(limit):
    """The guest uses more than ``limit`` bytes (0: no limit)."""
    used = guest_memory_used() if limit else None
    return used is not None and used > limit


def at_process_limit(limit):
    """Every one of the ``limit`` processes a policy allows is taken (0: no
    limit); one directory read, cheap enough to ask 50 times a second."""
    if not limit:
        return False
    try:
        names = os.listdir("/proc")
    except OSError:
        return False
    # Less init and the executor, which RLIMIT_NPROC does not count (root's).
    return sum(name.isdigit() for name in names) - 2 >= limit
