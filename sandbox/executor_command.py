"""One command, from its fork to its result. Runs INSIDE the container, one
of the executor's modules (sandbox/guest_loader.py; stdlib only).

While the command runs, one select loop reads the host's frames (the
command's stdin, a kill), writes the command's stdin, sends its output as O
and X frames, and watches its deadline, its output's flood cap and, under
gVisor, the guest's memory and processes (sandbox/guest_watch.py). After
every command, whatever its ending, kill(-1) ends every process but init and
the executor (the only processes the sandbox user does not own), and the
result is sent only once /proc shows none left.
"""

import os
import select
import signal
import struct
import time

from sandbox.executor_channel import CHUNK, send
from sandbox.executor_processes import ROOT, child_status, reap_all, spawn
from sandbox.guest_watch import at_process_limit, over_memory

TERM_GRACE_S = 1.0  # a timed-out command gets TERM, then this long before KILL
PENDING_CAP = 4 << 20  # stdin held for a slow command before the host is read no further
WATCH_S = 0.02  # how often the guest's memory and processes are read while a command runs


class CommandRun:
    """An ``exec`` request: ``run`` loops over the named steps until the
    command has ended and its pipes are drained, then gives the result."""

    def __init__(self, req, reader, arguments):
        self.reader = reader
        self.arguments = arguments
        self.started = time.monotonic()
        self.pid, self.stdin_w, out_r, err_r = spawn(req["argv"], req["env"], req.get("cwd", ROOT), arguments)
        self.tag = struct.pack(">I", req["id"])  # stdin frames name their request
        wants_stdin = bool(req.get("stdin"))
        if not wants_stdin:
            os.close(self.stdin_w)
            self.stdin_w = None
        self.pending = bytearray()
        self.stdin_done = not wants_stdin
        self.readers = {out_r: "O", err_r: "X"}
        self.deadline = self.started + float(req["timeout_s"])
        self.flood_bytes = int(req["flood_bytes"])
        self.produced = 0
        self.status = None
        self.ending = None  # timeout | flood | cancel | memory | processes
        self.kill_at = None
        self.watched = self.started

    def run(self):
        while self.readers or self.status is None:
            now = time.monotonic()
            self.watch_guest(now)
            self.time_out(now)
            self.notice_end()
            if self.status is not None and not self.readers:
                break
            ready_r, ready_w = self.wait(now)
            self.read_host_frames(ready_r)
            self.feed_stdin(ready_w)
            self.pump_output(ready_r)
        return self.finish()

    def watch_guest(self, now):
        """Every WATCH_S while the command runs: the guest's memory and
        processes, at the policy's limits the command's processes killed."""
        if self.ending is not None or self.status is not None or now - self.watched < WATCH_S:
            return
        self.watched = now
        limits = self.arguments
        self.ending = ("memory" if over_memory(limits.address_space) else
                       "processes" if at_process_limit(limits.processes) else None)
        if self.ending is not None:
            # As the OOM killer would under runc: the command's processes
            # go (every one: kill(-1)), the sandbox stays.
            reap_all()
            spent = (f"memory ({limits.address_space >> 20} MiB)" if self.ending == "memory"
                     else f"processes ({limits.processes})")
            send("X", f"escrow: the sandbox's {spent} ran out; every process of this command was killed\n"
                 .encode())

    def time_out(self, now):
        """At the deadline TERM to the command's group; TERM_GRACE_S later,
        KILL to every process."""
        if self.ending is None and now >= self.deadline:
            self.ending = "timeout"
            self.kill_at = now + TERM_GRACE_S
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except OSError:
                pass
        if self.kill_at is not None and now >= self.kill_at:
            reap_all()
            self.kill_at = None

    def notice_end(self):
        if self.status is None:
            self.status = child_status(self.pid)
            if self.status is not None:
                # The command ended: nothing it started may outlive it, and
                # its background processes would otherwise hold the pipes open.
                reap_all()
                self.kill_at = None

    def wait(self, now):
        """The descriptors ready to read and to write; the host is read no
        further while PENDING_CAP of stdin waits for the command."""
        fds = [self.reader.fd, *self.readers] if len(self.pending) < PENDING_CAP else list(self.readers)
        writes = [self.stdin_w] if self.stdin_w is not None and self.pending else []
        timeout = (WATCH_S if self.status is None and self.arguments.address_space else
                   0.05 if self.status is None else 0.5)
        if self.ending is None:
            timeout = min(timeout, max(self.deadline - now, 0))
        ready_r, ready_w, _ = select.select(fds, writes, [], timeout)
        return ready_r, ready_w

    def read_host_frames(self, ready_r):
        """This request's stdin and its end; a kill. Frames of another
        request (a late stdin) are dropped."""
        if self.reader.fd in ready_r:
            self.reader.fill()
        while self.reader.frames:
            kind, payload = self.reader.frames.pop(0)
            mine = payload[:4] == self.tag
            if kind == "I" and self.stdin_w is not None and mine:
                self.pending += payload[4:]
            elif kind == "E" and self.stdin_w is not None and mine:
                self.stdin_done = True
            elif kind == "K" and self.ending is None:
                self.ending = "cancel"
                reap_all()

    def feed_stdin(self, ready_w):
        """What the command's stdin takes; closed once all is written, or
        once the command has ended."""
        if ready_w:
            try:
                self.pending = self.pending[os.write(self.stdin_w, self.pending[:CHUNK]):]
            except BrokenPipeError:
                self.pending.clear()
                self.stdin_done = True
        if self.stdin_w is not None and self.stdin_done and not self.pending:
            os.close(self.stdin_w)
            self.stdin_w = None
        elif self.stdin_w is not None and self.status is not None:
            os.close(self.stdin_w)
            self.stdin_w = None

    def pump_output(self, ready_r):
        """The command's output to the host, up to its flood cap; past the
        cap every process of the command is killed."""
        for fd in [fd for fd in ready_r if fd in self.readers]:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                os.close(fd)
                del self.readers[fd]
                continue
            if self.produced <= self.flood_bytes:
                send(self.readers[fd], chunk)
            self.produced += len(chunk)
            if self.produced > self.flood_bytes and self.ending is None:
                self.ending = "flood"
                reap_all()

    def finish(self):
        """The last reap, then the result: 124 for a timeout, 137 at the
        guest's limits, 128 + the signal, or the command's own code."""
        left = reap_all()
        if self.status is None:
            code = None
        elif self.ending == "timeout":
            code = 124
        elif self.ending in ("memory", "processes"):
            code = 137
        elif os.WIFSIGNALED(self.status):
            code = 128 + os.WTERMSIG(self.status)
        else:
            code = os.WEXITSTATUS(self.status)
        return {"exit_code": code, "ending": self.ending, "left": left, "produced": self.produced,
                "duration_s": round(time.monotonic() - self.started, 4)}
