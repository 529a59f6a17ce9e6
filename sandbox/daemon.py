"""Reach the Docker daemon, or say clearly why not and what to do."""

from __future__ import annotations

import docker
import docker.errors

from sandbox.errors import DaemonUnavailable, ImageMissing

DEFAULT_SOCKET = "unix:///var/run/docker.sock"


def connect(docker_host: str | None = None, timeout: float = 30.0) -> docker.DockerClient:
    """A pinged client for ``docker_host``, or the local socket. DOCKER_HOST is
    read once, into ``Settings.docker_host``; nothing here reads the environment."""
    where = docker_host or DEFAULT_SOCKET
    try:
        client = docker.DockerClient(base_url=where, timeout=int(timeout))
        client.ping()
    except docker.errors.DockerException as exc:
        raise DaemonUnavailable(
            f"cannot reach the Docker daemon at {where}: {_short(exc)}. "
            "Start it (e.g. `dockerd &` as root, or `systemctl start docker`) or point "
            "DOCKER_HOST / --docker-host at a running daemon.",
            docker_host=docker_host,
        ) from exc
    except Exception as exc:  # requests/urllib3 errors escape docker-py's own types
        raise DaemonUnavailable(
            f"cannot reach the Docker daemon at {where}: {_short(exc)}. "
            "Start it or point DOCKER_HOST / --docker-host at a running daemon.",
            docker_host=docker_host,
        ) from exc
    return client


def require_image(client: docker.DockerClient, tag: str) -> str:
    """The image id for ``tag``; ImageMissing with the build command if absent."""
    missing = ImageMissing(
        f"sandbox image {tag!r} is not present in the local Docker daemon. "
        f"Build it with: escrow sandbox build --image {tag}",
        image=tag,
    )
    try:
        image_id = client.images.get(tag).id
    except docker.errors.ImageNotFound as exc:
        raise missing from exc
    if image_id is None:  # the SDK types the id optional; the daemon always reports one
        raise missing
    return image_id


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[-1][:300] if text else exc.__class__.__name__
