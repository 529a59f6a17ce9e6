"""The executor's end of its channel to the host. Runs INSIDE the container,
one of the executor's modules (sandbox/guest_loader.py; stdlib only).

Frames, both ways: one kind byte, a 4-byte big-endian length, the payload.
Host to executor: R request (JSON), I stdin bytes and E end of stdin (each
led by its request's 4-byte id), K kill
the running request, V the host's verdict on a resolved path (JSON).
Executor to host: H hello (JSON), O stdout bytes, X stderr bytes, P a
resolved path awaiting the verdict (JSON), D the request's result (JSON).
A command's output only ever travels inside O and X frames: it cannot forge
a frame.
"""

import json
import os
import select
import struct
import sys
import time

CHUNK = 65536
HEADER = struct.Struct(">BI")
MAX_FRAME = 64 << 20


class HostGone(Exception):
    pass


def send(kind, payload):
    data = HEADER.pack(ord(kind), len(payload)) + payload
    view = memoryview(data)
    out = sys.stdout.fileno()  # the container's attached stdout
    while view:
        view = view[os.write(out, view):]


def send_json(kind, obj):
    send(kind, json.dumps(obj).encode())


class Reader:
    """Frames from the host: ``fill`` parses what one read brings, ``next`` waits for a frame."""

    def __init__(self, fd):
        self.fd = fd
        self.buffer = bytearray()
        self.frames = []

    def fill(self):
        chunk = os.read(self.fd, CHUNK)
        if not chunk:
            raise HostGone()
        self.buffer += chunk
        while len(self.buffer) >= HEADER.size:
            kind, size = HEADER.unpack_from(self.buffer)
            if size > MAX_FRAME:
                raise HostGone()
            if len(self.buffer) < HEADER.size + size:
                break
            self.frames.append((chr(kind), bytes(self.buffer[HEADER.size:HEADER.size + size])))
            del self.buffer[:HEADER.size + size]

    def next(self, timeout=None):
        """The next frame, waiting up to ``timeout`` (None: for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.frames:
            left = None if deadline is None else max(deadline - time.monotonic(), 0)
            if not select.select([self.fd], [], [], left)[0]:
                return None
            self.fill()
        return self.frames.pop(0)
