"""Run one command in a running container with a hard deadline.

docker-py's ``exec_run`` has no timeout and blocks while any process keeps
stdout open, so this module drives the hijacked exec socket itself: it
optionally writes stdin, demultiplexes Docker's 8-byte framed stream into two
capped captures, and stops at a host-side deadline (calling ``on_deadline``,
which kills every sandbox process) even when a command escaped its own
in-container ``timeout`` by starting a new session. A set ``cancel`` event
(Ctrl-C) stops the command the same way within a fraction of a second.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import cast

import docker
import docker.errors

from orchestrator.contract import Frozen
from sandbox.capture import CappedOutput, StreamCapture
from sandbox.errors import ExecError

GRACE_S = 3.0  # past the in-container timeout before the host reaps
FLOOD_FACTOR = 4096  # stop reading after this many times the cap (bounded host CPU)


class ExecOutcome(Frozen):
    exit_code: int | None
    stdout: CappedOutput
    stderr: CappedOutput
    duration_s: float
    timed_out: bool
    flooded: bool
    canceled: bool = False


class ExecLimits(Frozen):
    timeout_s: float
    stdout_cap: int
    stderr_cap: int


# Runs the command under ``timeout`` (TERM, then KILL a second later, to its
# process group), then kills every process the sandbox user owns. kill(-1)
# spares only init, the container's main process (it runs as another user, so
# the sandbox user cannot signal it) and the caller; it is atomic against fork
# (a process with a pending SIGKILL cannot fork), so one pass also stops a fork
# bomb or a process that left the group with setsid. A builtin, so it needs no
# new process even when the pids limit is saturated. The host runs REAP again
# after every exec (Sandbox.exec), since a command can kill this wrapper first.
REAP = "kill -9 -1 2>/dev/null; exit 0"
_WRAPPER = 't=$1; shift; /usr/bin/timeout --kill-after=1 "$t" "$@"; rc=$?; kill -9 -1 2>/dev/null; exit $rc'


def wrap_command(argv: Sequence[str], env: dict[str, str], timeout_s: float) -> list[str]:
    """``argv`` with an empty environment plus ``env``, under the timeout and reaper."""
    pairs = [f"{k}={v}" for k, v in sorted(env.items())]
    return ["/usr/bin/env", "-i", *pairs, "/bin/bash", "-c", _WRAPPER, "escrow-exec", f"{timeout_s:g}s", *argv]


def run_exec(
    api: docker.APIClient,
    container_id: str,
    argv: list[str],
    *,
    user: str,
    workdir: str,
    limits: ExecLimits,
    stdin: bytes | Iterable[bytes] | None = None,
    on_deadline: Callable[[], None] = lambda: None,
    stdout_capture: StreamCapture | None = None,
    cancel: threading.Event | None = None,
) -> ExecOutcome:
    started = time.monotonic()
    try:
        exec_id = api.exec_create(container_id, argv, stdout=True, stderr=True, stdin=stdin is not None,
                                  user=user, workdir=workdir)["Id"]
        raw = api.exec_start(exec_id, socket=True)
    except docker.errors.DockerException as exc:
        raise ExecError(f"docker exec failed to start: {exc}", container=container_id) from exc
    # The SDK hands back a SocketIO wrapping the socket (on some transports the socket itself).
    sock = cast(socket.socket, getattr(raw, "_sock", raw))
    out, err = stdout_capture or StreamCapture(limits.stdout_cap), StreamCapture(limits.stderr_cap)
    deadline = started + limits.timeout_s + GRACE_S
    flood_limit = FLOOD_FACTOR * (limits.stdout_cap + limits.stderr_cap) + getattr(out, "limit", 0)
    timed_out = flooded = canceled = False
    try:
        if stdin is not None:
            # A stream (a tar made a member at a time) is sent as it is made.
            for chunk in (stdin,) if isinstance(stdin, bytes) else stdin:
                sock.sendall(chunk)
            sock.shutdown(socket.SHUT_WR)
        reaped_at: float | None = None

        def read_until() -> float:
            """The deadline, brought forward once a flood is being reaped."""
            return reaped_at or deadline

        for frame_type, payload in _frames(sock, read_until, cancel):
            (out if frame_type != 2 else err).feed(payload)
            if out.total + err.total > flood_limit and not flooded:
                flooded = True
                on_deadline()
                reaped_at = time.monotonic() + GRACE_S
        if time.monotonic() >= deadline:
            timed_out = True
    except (_DeadlinePassed, _Canceled) as stop:
        canceled = isinstance(stop, _Canceled)
        timed_out = not flooded and not canceled
        on_deadline()
        try:
            for frame_type, payload in _frames(sock, lambda: time.monotonic() + GRACE_S):
                (out if frame_type != 2 else err).feed(payload)
        except (_DeadlinePassed, OSError):
            pass
    except OSError as exc:
        raise ExecError(f"exec stream broke: {exc}", container=container_id) from exc
    finally:
        _close(raw, sock)
    exit_code = _exit_code(api, exec_id)
    duration = time.monotonic() - started
    if exit_code in (124, 137) and duration >= limits.timeout_s and not canceled:
        timed_out = True
    return ExecOutcome(exit_code=exit_code, stdout=out.result(), stderr=err.result(),
                       duration_s=round(duration, 4), timed_out=timed_out, flooded=flooded,
                       canceled=canceled)


class _DeadlinePassed(Exception):
    pass


class _Canceled(Exception):
    pass


CANCEL_POLL_S = 0.1


def _frames(sock: socket.socket, deadline: Callable[[], float], cancel: threading.Event | None = None):
    """Yield (stream, payload) frames of Docker's multiplexed stream until EOF."""
    buffer = bytearray()
    while True:
        if cancel is not None and cancel.is_set():
            raise _Canceled
        remaining = deadline() - time.monotonic()
        if remaining <= 0:
            raise _DeadlinePassed
        ready, _, _ = select.select([sock], [], [], min(remaining, CANCEL_POLL_S if cancel else 1.0))
        if not ready:
            continue
        chunk = sock.recv(65536)
        if not chunk:
            return
        buffer += chunk
        while len(buffer) >= 8:
            stream_type, size = buffer[0], struct.unpack(">I", bytes(buffer[4:8]))[0]
            if len(buffer) < 8 + size:
                break
            yield stream_type, bytes(buffer[8 : 8 + size])
            del buffer[: 8 + size]


def _close(raw: object, sock: socket.socket) -> None:
    for closer in (getattr(raw, "close", None), sock.close):
        try:
            if closer:
                closer()
        except OSError:
            pass


def _exit_code(api: docker.APIClient, exec_id: str) -> int | None:
    """The exec's exit code; Docker may report it a moment after EOF."""
    for _ in range(50):
        info = api.exec_inspect(exec_id)
        if not info.get("Running"):
            return info.get("ExitCode")
        time.sleep(0.02)
    return None
