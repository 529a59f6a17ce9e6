"""The sandbox's persistent executor. Runs INSIDE the container as its main
process (``python3 -I -S -c``; stdlib only: sandbox/guest_loader.py creates
its modules there), as root with only KILL, SETUID, SETGID and SETPCAP
(under gVisor also gVisor's SYS_ADMIN), and talks to the host over the
container's attached stdio, nothing else. Everything the model asks for runs
as the sandbox user in a forked child that first gives up every capability
(sandbox/executor_processes.py).

Its modules, by concern: the channel's frames (executor_channel), forking,
dropping to the sandbox user and reaping (executor_processes), a command's
select loop (executor_command), the file operations (executor_file_ops),
the command filter (command_seccomp), the PID namespaces (command_namespace)
and the guest watch (guest_watch). This one is the request loop: one request
at a time, each answered by a D frame.
"""

import json
import os
import signal
import sys

from sandbox.executor_channel import HostGone, Reader, send_json
from sandbox.executor_command import CommandRun
from sandbox.executor_file_ops import run_file_op
from sandbox.executor_processes import ExecutorArguments, adopt_orphans, others, reap_all


def main():
    arguments = ExecutorArguments(sys.argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    adopt_orphans()
    reader = Reader(sys.stdin.fileno())
    send_json("H", {"pid": os.getpid(), "uid": os.getuid(), "version": 1})
    while True:
        try:
            frame = reader.next()
        except HostGone:
            return
        kind, payload = frame
        if kind != "R":
            continue  # a stray frame of an earlier request (stdin, a late kill)
        req = json.loads(payload)
        try:
            if req["op"] == "exec":
                result = CommandRun(req, reader, arguments).run()
            elif req["op"] == "file":
                result = run_file_op(req, reader, arguments)
            elif req["op"] == "ping":
                result = {"pid": os.getpid(), "left": len(others())}
            else:
                result = {"error": f"unknown op {req['op']!r}"}
        except HostGone:
            reap_all()
            return
        send_json("D", {"id": req.get("id"), **result})
