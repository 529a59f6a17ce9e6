"""Which OCI runtime a sandbox runs under, chosen once per run.

``runsc`` is gVisor: a user-space kernel between the sandbox's processes and
the host's, so model code (or a hostile repository's) meets gVisor's syscall
surface rather than Linux's. ``runc`` shares the host kernel. ``auto`` takes
runsc when dockerd has it registered, else runc, and says which and why.
"""

from __future__ import annotations

from typing import Literal

import docker
import docker.errors

from orchestrator.contract import Frozen
from orchestrator.settings import RuntimeWanted
from sandbox.errors import DaemonUnavailable, RuntimeMissing

RuntimeName = Literal["runsc", "runc"]
REGISTER_HINT = ("install it and register it with dockerd (bash scripts/setup.sh does both: "
                 "/etc/docker/daemon.json \"runtimes\", then a dockerd reload)")


class RuntimeChoice(Frozen):
    name: RuntimeName
    wanted: RuntimeWanted
    why: str


def registered_runtimes(client: docker.DockerClient) -> frozenset[str]:
    """The runtimes dockerd will start containers with (``docker info``)."""
    try:
        info = client.info()
    except docker.errors.DockerException as exc:
        raise DaemonUnavailable(f"the Docker daemon did not say which runtimes it has: {exc}") from exc
    return frozenset((info.get("Runtimes") or {}).keys())


def choose_runtime(client: docker.DockerClient, wanted: RuntimeWanted) -> RuntimeChoice:
    """The runtime for ``wanted``; RuntimeMissing when it is named and absent."""
    have = registered_runtimes(client)
    if wanted == "auto":
        if "runsc" in have:
            return RuntimeChoice(name="runsc", wanted=wanted, why="auto: dockerd has runsc (gVisor)")
        return RuntimeChoice(name="runc", wanted=wanted,
                             why="auto: dockerd has no runsc, so runc (the host's kernel); to use gVisor, "
                             + REGISTER_HINT)
    if wanted not in have:
        raise RuntimeMissing(f"sandbox runtime {wanted!r} is not registered with dockerd "
                             f"(it has: {', '.join(sorted(have)) or 'none'}); {REGISTER_HINT}",
                             runtime=wanted)
    return RuntimeChoice(name=wanted, wanted=wanted, why=f"asked for {wanted}")
