"""Sandbox containers are labelled with their owner process (pid, its start
time, host), and the host-side state directories (``/tmp/escrow-<run>-*``)
carry the same labels in an owner file, so what a crashed run left behind
can be found and removed without touching what live runs use."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
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


_abandoned: set[str] = set()
_abandoned_lock = threading.Lock()


def abandon_run(run_id: str) -> None:
    """A start of ``run_id`` was given up on in this process (its deadline
    passed): a container of it that lands later, however late, is an orphan
    although its owner lives (``remove_orphans``, ``remove_abandoned``)."""
    with _abandoned_lock:
        _abandoned.add(run_id)


def abandoned(labels: dict[str, str]) -> bool:
    """A container of a run whose start this process abandoned."""
    if labels.get(LABEL_PID) != str(os.getpid()) or labels.get(LABEL_HOST) != socket.gethostname():
        return False
    with _abandoned_lock:
        return labels.get(LABEL_RUN) in _abandoned


def remove_abandoned(client: docker.DockerClient, run_id: str) -> list[str]:
    """Remove the containers of ``run_id`` (a start this process abandoned) that exist now."""
    return _remove(client, client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"}),
                   lambda labels: abandoned(labels))


def removal_under_way(exc: docker.errors.APIError) -> bool:
    """dockerd's 409 for a container another caller is already removing."""
    return exc.status_code == 409 and "already in progress" in str(exc)


def remove_orphans(client: docker.DockerClient, *, include_live: bool = False) -> list[str]:
    """Remove sandbox containers whose owner is gone (or all with ``include_live``);
    returns their names."""
    # The low-level listing carries the labels: no inspect per container,
    # which races with another process removing one meanwhile.
    return _remove(client, client.api.containers(all=True, filters={"label": f"{LABEL_ROLE}=1"}),
                   lambda labels: include_live or not owner_alive(labels) or abandoned(labels))


def _remove(client: docker.DockerClient, listed: list[dict], dead: Callable[[dict[str, str]], bool]) -> list[str]:
    removed: list[str] = []
    for found in listed:
        if dead(found.get("Labels") or {}):
            try:
                client.api.remove_container(found["Id"], force=True)
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError as exc:
                if removal_under_way(exc):
                    continue
                raise
            removed.append((found.get("Names") or [found["Id"][:12]])[0].lstrip("/"))
    return removed


STATE_PREFIX = "escrow-"
OWNER_FILE = "owner.json"


def claim_state_dir(path: Path, run_id: str) -> None:
    """Record the owner of a run's host-side state directory (the same labels
    as its container), so a later gc can tell a dead run's leftovers."""
    (path / OWNER_FILE).write_text(json.dumps(owner_labels(run_id)))


def remove_dead_state_dirs(root: Path | None = None, *, include_live: bool = False) -> list[str]:
    """Remove ``escrow-*`` state directories under ``root`` (the temp dir)
    whose recorded owner is gone (or all owned ones with ``include_live``).
    A directory without an owner file is left alone: it may be one being
    created this moment, or not ours."""
    removed: list[str] = []
    for path in sorted(Path(root or tempfile.gettempdir()).glob(f"{STATE_PREFIX}*")):
        try:
            labels = json.loads((path / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(labels, dict) or labels.get(LABEL_ROLE) != "1":
            continue
        if include_live or not owner_alive(labels):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed
