"""What a sandbox container runs, as tests that wait for a tool call see it."""

from __future__ import annotations

import subprocess

# An exec into a container that is being torn down (or frozen under load)
# can hold its stream open forever; a poll must give up and poll again.
EXEC_TIMEOUT_S = 20


def commands_in(container) -> list[str]:
    """The command line of every process in ``container``, read from inside
    as root (under gVisor `docker top` lists the host's processes, not the
    sandbox's); [] while the container starts, once it has gone, or when
    the exec does not answer in time."""
    try:
        done = subprocess.run(["docker", "exec", "--user", "0", container.id, "ps", "-eo", "args="],
                              capture_output=True, timeout=EXEC_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return []
    return done.stdout.decode(errors="replace").splitlines() if done.returncode == 0 else []
