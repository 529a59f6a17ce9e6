"""The host's end of the sandbox's persistent executor (``executor_script``),
and the program that starts it in the container (``guest_loader``).

One attached stdio stream per container carries every command and file
operation, so a tool call costs no ``docker exec``. The stream is Docker's
8-byte multiplexed framing around the executor's own frames (kind byte,
4-byte length, payload); both are parsed here as data under caps, and
anything else (an unknown kind, an oversized frame, a result that does not
match its request, silence past the deadline, the stream's end) is an
``ExecutorBroken``: the executor is then never used again, and the run
ends INFRA_ERROR rather than trusting it.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any, NoReturn, cast

from orchestrator.contract import Frozen
from sandbox.errors import ExecutorBroken

# The executor's modules (stdlib only), each after those it imports: in this
# order sandbox/guest_loader.py creates them in the container, from their
# sources written into the program, and then runs the executor's main.
GUEST_MODULES = ("command_seccomp", "command_namespace", "guest_watch", "executor_channel", "executor_processes",
                 "executor_command", "executor_file_ops", "executor_script")


def _source(module: str) -> str:
    return resources.files("sandbox").joinpath(f"{module}.py").read_text(encoding="utf-8")


GUEST_SOURCES = {f"sandbox.{module}": _source(module) for module in GUEST_MODULES}
PROGRAM = _source("guest_loader") + f"\nrun_executor({GUEST_SOURCES!r})\n"
COMMAND = ["/usr/bin/python3", "-I", "-S", "-c", PROGRAM, "escrow-executor"]
# A shell loop that prints, one a line, the number of each process whose
# argv is the executor's (its program and its last word): how a command
# finds the executor, in the doctor's probe and the tests, rather than
# trusting a number (under gVisor a command's PID namespace numbers its own).
FIND_EXECUTOR = (r"for d in /proc/[0-9]*; do tr '\0' '\n' < $d/cmdline 2>/dev/null "
                 rf"| sed -n '1p;/^{COMMAND[-1]}$/p' | tr '\n' ' ' "
                 rf"| grep -qx '{COMMAND[0]} {COMMAND[-1]} ' && echo ${{d#/proc/}}; done")

_HEADER = struct.Struct(">BI")
_DOCKER_HEADER = struct.Struct(">BxxxI")
_REQUEST_TAG = struct.Struct(">I")
_STDIN_CHUNK = 1 << 20
_MAX_OUTPUT_FRAME = 1 << 16  # the executor reads a command's pipes 64 KiB at a time
_MAX_JSON_FRAME = 64 << 20
_DIAGNOSTICS_CAP = 8192  # the executor's own stderr, kept for error messages
GRACE_S = 5.0  # past a request's own timeout (TERM grace, reaping) before the host gives up
START_TIMEOUT_S = 60.0


class Ending(Frozen):
    """How a request ended, as the executor reported it."""

    result: dict[str, Any]
    canceled_by_host: bool


class ExecutorChannel:
    """Requests to one container's executor, one at a time."""

    def __init__(self, raw: object, container_id: str, run_id: str) -> None:
        self._raw = raw
        # The SDK hands back a SocketIO wrapping the socket (on some transports the socket itself).
        self._sock = cast(socket.socket, getattr(raw, "_sock", raw))
        self._container_id = container_id
        self._run_id = run_id
        self._docker_buffer = bytearray()
        self._buffer = bytearray()
        self._diagnostics = bytearray()
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._next_id = 0
        self.broken: str | None = None
        self.pid: int | None = None

    # -- requests ---------------------------------------------------------------

    def hello(self, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
        """The executor's first frame: it is up, as whom, with which pid."""
        with self._lock:
            kind, payload = self._next_frame(time.monotonic() + timeout_s)
            if kind != "H":
                self._fail(f"the executor began with a {kind!r} frame, not hello")
            hello = self._json(payload)
            self.pid = int(hello.get("pid", 0)) or None
            return hello

    def request(self, request: dict[str, Any], *, timeout_s: float, stdin: bytes | Iterable[bytes] | None = None,
                on_output: Callable[[str, bytes], None] = lambda kind, data: None,
                on_resolved: Callable[[str], bool] | None = None,
                cancel: threading.Event | None = None) -> Ending:
        """Send one request and read its frames up to the result.

        ``on_output`` gets each O (stdout) or X (stderr) payload; ``on_resolved``
        judges a file op's resolved path (the ACL, decided here on the host)."""
        with self._lock:
            if self.broken:
                raise ExecutorBroken(f"the sandbox's executor is unusable: {self.broken}", run_id=self._run_id)
            self._next_id += 1
            ident = self._next_id
            self._send("R", json.dumps({**request, "id": ident}).encode())
            feeder = None
            if stdin is not None:
                # Fed from a thread while this one reads: a command that writes
                # before it has read all its input never blocks the channel.
                feeder = _Feeder(self, stdin, ident)
                feeder.start()
            try:
                return self._until_result(ident, timeout_s, on_output, on_resolved, cancel)
            finally:
                if feeder is not None:
                    feeder.stop()

    def _until_result(self, ident: int, timeout_s: float, on_output: Callable[[str, bytes], None],
                      on_resolved: Callable[[str], bool] | None, cancel: threading.Event | None) -> Ending:
        deadline = time.monotonic() + timeout_s + GRACE_S
        canceled = False
        while True:
            if cancel is not None and cancel.is_set() and not canceled:
                canceled = True
                self._send("K", b"")
                deadline = min(deadline, time.monotonic() + GRACE_S)
            kind, payload = self._next_frame(deadline, cancel if not canceled else None)
            if kind == "":
                continue  # the cancel event fired while waiting
            if kind in ("O", "X"):
                try:
                    on_output(kind, payload)
                except Exception:  # e.g. an export cap broken while reading: the command is stopped first
                    self._abandon(ident)
                    raise
            elif kind == "P" and on_resolved is not None:
                resolved = self._json(payload).get("resolved")
                if not isinstance(resolved, str):
                    self._fail("a resolved path that is not a string")
                allow = on_resolved(resolved)
                self._send("V", json.dumps({"allow": bool(allow)}).encode())
            elif kind == "D":
                result = self._json(payload)
                if result.get("id") != ident:
                    self._fail(f"a result for request {result.get('id')!r} while {ident} was running")
                return Ending(result=result, canceled_by_host=canceled)
            else:
                self._fail(f"an unexpected {kind!r} frame")

    def _abandon(self, ident: int) -> None:
        """Kill request ``ident`` and read up to its result, its output
        dropped, so the next request starts in step (a refused export left
        its result to the next command, and the sandbox was lost)."""
        self._send("K", b"")
        deadline = time.monotonic() + GRACE_S
        while True:
            kind, payload = self._next_frame(deadline)
            if kind == "D":
                if self._json(payload).get("id") != ident:
                    self._fail("a result for another request while one was abandoned")
                return
            if kind not in ("O", "X"):
                self._fail(f"an unexpected {kind!r} frame while a request was abandoned")

    # -- framing ----------------------------------------------------------------

    def _send(self, kind: str, payload: bytes) -> None:
        """One whole frame (frames from the feeder and from this thread never interleave)."""
        with self._send_lock:
            try:
                self._sock.sendall(_HEADER.pack(ord(kind), len(payload)) + payload)
            except OSError as exc:
                self._fail(f"the channel broke while sending: {exc}")

    def _next_frame(self, deadline: float, cancel: threading.Event | None = None) -> tuple[str, bytes]:
        """The executor's next frame; ("", b"") when ``cancel`` is set first."""
        while True:
            frame = self._parse()
            if frame is not None:
                return frame
            if cancel is not None and cancel.is_set():
                return "", b""
            left = deadline - time.monotonic()
            if left <= 0:
                self._fail("the executor did not answer in time")
            ready, _, _ = select.select([self._sock], [], [], min(left, 0.1 if cancel else 1.0))
            if not ready:
                continue
            try:
                chunk = self._sock.recv(1 << 18)
            except OSError as exc:
                self._fail(f"the channel broke: {exc}")
            if not chunk:
                self._fail("the executor's stream ended (it died, or its container stopped)")
            self._docker_buffer += chunk
            self._demux()

    def _demux(self) -> None:
        """Docker's framing: stdout bytes go to the executor's frames, stderr
        bytes to its diagnostics (kept, capped, for the error message)."""
        while len(self._docker_buffer) >= _DOCKER_HEADER.size:
            stream, size = _DOCKER_HEADER.unpack_from(self._docker_buffer)
            if len(self._docker_buffer) < _DOCKER_HEADER.size + size:
                return
            data = bytes(self._docker_buffer[_DOCKER_HEADER.size : _DOCKER_HEADER.size + size])
            del self._docker_buffer[: _DOCKER_HEADER.size + size]
            if stream == 1:
                self._buffer += data
            else:
                self._diagnostics += data
                del self._diagnostics[:-_DIAGNOSTICS_CAP]

    def _parse(self) -> tuple[str, bytes] | None:
        if len(self._buffer) < _HEADER.size:
            return None
        code, size = _HEADER.unpack_from(self._buffer)
        kind = chr(code)
        cap = _MAX_OUTPUT_FRAME if kind in ("O", "X") else _MAX_JSON_FRAME if kind in ("H", "P", "D") else -1
        if cap < 0:
            self._fail(f"an unknown frame kind {code}")
        if size > cap:
            self._fail(f"a {kind!r} frame of {size} bytes, over its cap of {cap}")
        if len(self._buffer) < _HEADER.size + size:
            return None
        payload = bytes(self._buffer[_HEADER.size : _HEADER.size + size])
        del self._buffer[: _HEADER.size + size]
        return kind, payload

    def _json(self, payload: bytes) -> dict[str, Any]:
        try:
            value = json.loads(payload)
        except ValueError:
            self._fail("a frame that is not JSON")
        if not isinstance(value, dict):
            self._fail("a JSON frame that is not an object")
        return value

    def _fail(self, why: str) -> NoReturn:
        self.broken = why
        said = bytes(self._diagnostics).decode("utf-8", "replace").strip()
        detail = f"; it said: {said[-500:]}" if said else ""
        raise ExecutorBroken(f"the sandbox's executor failed: {why}{detail}", run_id=self._run_id,
                             container=self._container_id)

    def close(self) -> None:
        for closer in (getattr(self._raw, "close", None), self._sock.close):
            try:
                if closer:
                    closer()
            except OSError:
                pass



class _Feeder(threading.Thread):
    """Sends a request's stdin as I frames, then E; stopped once the result is in."""

    def __init__(self, channel: ExecutorChannel, stdin: bytes | Iterable[bytes], ident: int) -> None:
        super().__init__(daemon=True, name="escrow-executor-stdin")
        self._channel = channel
        self._stdin = stdin
        self._tag = _REQUEST_TAG.pack(ident)  # a late frame can never feed the next request
        self._stopped = threading.Event()

    def run(self) -> None:
        try:
            for chunk in (self._stdin,) if isinstance(self._stdin, bytes) else self._stdin:
                for at in range(0, len(chunk), _STDIN_CHUNK):
                    if self._stopped.is_set():
                        return
                    self._channel._send("I", self._tag + chunk[at : at + _STDIN_CHUNK])
            self._channel._send("E", self._tag)
        except ExecutorBroken:
            pass  # the reading thread meets the same broken channel and reports it

    def stop(self) -> None:
        self._stopped.set()
        self.join(GRACE_S)
