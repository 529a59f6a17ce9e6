"""Sandbox containers are labelled with their owner process (pid, its start
time, host), so containers left by a crashed run can be found and removed
without touching those of live runs."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import docker
import docker.errors

from sandbox.hardening import LABEL_HOST, LABEL_PID, LABEL_PID_START, LABEL_ROLE, LABEL_RUN


def process_start(pid: int) -> str | None:
    """Start time (clock ticks since boot) of ``pid``; None when it is gone.
    Comparing it guards against a recycled pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def owner_labels(run_id: str) -> dict[str, str]:
    pid = os.getpid()
    return {
        LABEL_ROLE: "1",
        LABEL_RUN: run_id,
        LABEL_PID: str(pid),
        LABEL_PID_START: process_start(pid) or "",
        LABEL_HOST: socket.gethostname(),
    }


def owner_alive(labels: dict[str, str]) -> bool:
    """True unless the owner is provably gone (same host, pid dead or recycled)."""
    if labels.get(LABEL_HOST) != socket.gethostname():
        return True  # another machine's run: not ours to judge
    try:
        pid = int(labels.get(LABEL_PID, ""))
    except ValueError:
        return False
    start = process_start(pid)
    return start is not None and start == labels.get(LABEL_PID_START)


def remove_orphans(client: docker.DockerClient, *, include_live: bool = False) -> list[str]:
    """Remove sandbox containers whose owner is gone (or all with ``include_live``);
    returns their names."""
    removed: list[str] = []
    for container in client.containers.list(all=True, filters={"label": f"{LABEL_ROLE}=1"}):
        if include_live or not owner_alive(container.labels):
            try:
                container.remove(force=True)
                removed.append(container.name)
            except docker.errors.NotFound:
                continue
    return removed
