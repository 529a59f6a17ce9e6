"""Run one command in a running container with a hard deadline.

docker-py's ``exec_run`` has no timeout and blocks while any process keeps
stdout open, so this module drives the hijacked exec socket itself: it
optionally writes stdin, demultiplexes Docker's 8-byte framed stream into two
capped captures, and stops at a host-side deadline (calling ``on_deadline``,
which kills every sandbox process) even when a command escaped its own
in-container ``timeout`` by starting a new session.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Callable, Sequence

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


class ExecLimits(Frozen):
    timeout_s: float
    stdout_cap: int
    stderr_cap: int


# Runs the command under ``timeout`` (TERM, then KILL a second later, to its
# process group), then kills every process left behind - including ones that
# escaped the group with setsid - except init, the container's main process
# and itself. Repeats while a fork bomb is still spawning. Builtins only, so
# it works even when the pids limit is saturated.
REAP = (
    'keep=" 1 $1 $$ "; for ((round = 0; round < 50; round++)); do found=0; '
    'for d in /proc/[0-9]*; do p=${d#/proc/}; case "$keep" in *" $p "*) continue;; esac; '
    'kill -9 "$p" 2>/dev/null && found=1; done; [ "$found" = 0 ] && break; done'
)
_WRAPPER = 'main=$1; t=$2; shift 2; /usr/bin/timeout --kill-after=1 "$t" "$@"; rc=$?; set -- "$main"; ' + REAP + "; exit $rc"


def wrap_command(argv: Sequence[str], env: dict[str, str], timeout_s: float, main_pid: str) -> list[str]:
    """``argv`` with an empty environment plus ``env``, under the timeout and reaper."""
    pairs = [f"{k}={v}" for k, v in sorted(env.items())]
    return ["/usr/bin/env", "-i", *pairs, "/bin/bash", "-c", _WRAPPER, "escrow-exec", main_pid, f"{timeout_s:g}s", *argv]


def run_exec(
    api: docker.APIClient,
    container_id: str,
    argv: list[str],
    *,
    user: str,
    workdir: str,
    limits: ExecLimits,
    stdin: bytes | None = None,
    on_deadline: Callable[[], None] = lambda: None,
    stdout_capture: StreamCapture | None = None,
) -> ExecOutcome:
    started = time.monotonic()
    try:
        exec_id = api.exec_create(container_id, argv, stdout=True, stderr=True, stdin=stdin is not None,
                                  user=user, workdir=workdir)["Id"]
        raw = api.exec_start(exec_id, socket=True)
    except docker.errors.DockerException as exc:
        raise ExecError(f"docker exec failed to start: {exc}", container=container_id) from exc
    sock: socket.socket = getattr(raw, "_sock", raw)
    out, err = stdout_capture or StreamCapture(limits.stdout_cap), StreamCapture(limits.stderr_cap)
    deadline = started + limits.timeout_s + GRACE_S
    flood_limit = FLOOD_FACTOR * (limits.stdout_cap + limits.stderr_cap) + getattr(out, "limit", 0)
    timed_out = flooded = False
    try:
        if stdin is not None:
            sock.sendall(stdin)
            sock.shutdown(socket.SHUT_WR)
        reaped_at: float | None = None
        for frame_type, payload in _frames(sock, lambda: reaped_at or deadline):
            (out if frame_type != 2 else err).feed(payload)
            if out.total + err.total > flood_limit and not flooded:
                flooded = True
                on_deadline()
                reaped_at = time.monotonic() + GRACE_S
        if time.monotonic() >= deadline:
            timed_out = True
    except _DeadlinePassed:
        timed_out = not flooded
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
    if exit_code in (124, 137) and duration >= limits.timeout_s:
        timed_out = True
    return ExecOutcome(exit_code=exit_code, stdout=out.result(), stderr=err.result(),
                       duration_s=round(duration, 4), timed_out=timed_out, flooded=flooded)


class _DeadlinePassed(Exception):
    pass


def _frames(sock: socket.socket, deadline: Callable[[], float]):
    """Yield (stream, payload) frames of Docker's multiplexed stream until EOF."""
    buffer = bytearray()
    while True:
        remaining = deadline() - time.monotonic()
        if remaining <= 0:
            raise _DeadlinePassed
        ready, _, _ = select.select([sock], [], [], min(remaining, 1.0))
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
