"""What a sandbox container runs, as tests that wait for a tool call see it."""

from __future__ import annotations

import docker.errors


def commands_in(container) -> list[str]:
    """The command line of every process in ``container``, read from inside
    as root (under gVisor `docker top` lists the host's processes, not the
    sandbox's); [] while the container starts or once it has gone."""
    try:
        code, out = container.exec_run(["ps", "-eo", "args="], user="0")
    except docker.errors.DockerException:
        return []
    return out.decode(errors="replace").splitlines() if code == 0 else []
