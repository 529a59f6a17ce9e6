"""The workspace export, run INSIDE the sandbox container as the sandbox user
(passed to ``python3 -I -S -c``; stdlib only). Caps arrive as JSON on stdin.

Walks /workspace with lstat and directory fds (O_NOFOLLOW), never following a
symlink, and writes one framed record per entry on stdout (the format is
parsed as pure data by sandbox/export_stream.py, which checks everything
again: this script runs where the model lives).

Record: kind (1 byte) | path length (u32 BE) | path | data length (u64 BE) | data
  F regular file, X executable regular file   data = content
  H hard link to an earlier F/X record        data = that record's path
  L symlink                                   data = its target
  S skipped                                   data = the reason (UTF-8)
  D directory (counted against the entry cap)  empty data
  E end                                       empty path, data = record count (ASCII)
Hard-linked content is sent once, keyed by (st_dev, st_ino). Directories are
records too, so a million empty ones meet the entry cap in a moment instead
of running the export past its timeout.
"""

import json
import os
import stat
import struct
import sys

ROOT = "/workspace"
MAGIC = b"ESCROW-EXPORT/1\n"
SKIP_NAMES = {"__pycache__", ".pytest_cache"}


def main():
    caps = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    out = sys.stdout.buffer
    out.write(MAGIC)
    count = [0]
    seen = {}

    def record(kind, path, data):
        out.write(kind + struct.pack(">I", len(path)) + path + struct.pack(">Q", len(data)))
        out.write(data)
        count[0] += 1

    def listing(fd, path):
        try:
            return sorted(os.listdir(fd), reverse=True)
        except OSError as exc:
            record(b"S", path, ("unreadable directory: %s" % exc.strerror).encode())
            return []

    def send_file(dir_fd, name, path, st):
        key = (st.st_dev, st.st_ino)
        if key in seen:
            record(b"H", path, seen[key])
            return
        if st.st_size > caps["max_file_bytes"]:
            record(b"S", path, b"larger than the per-file cap (%d bytes)" % st.st_size)
            return
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError as exc:
            record(b"S", path, ("unreadable: %s" % exc.strerror).encode())
            return
        with os.fdopen(fd, "rb") as fh:
            now = os.fstat(fh.fileno())
            if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != key:
                record(b"S", path, b"changed while exporting")
                return
            data = fh.read(caps["max_file_bytes"] + 1)
        if len(data) > caps["max_file_bytes"]:
            record(b"S", path, b"larger than the per-file cap")
            return
        seen[key] = path
        record(b"X" if st.st_mode & 0o111 else b"F", path, data)

    # One open directory fd per level of the current path: bounded by max_depth.
    root = os.open(ROOT, os.O_RDONLY | os.O_DIRECTORY)
    stack = [[root, b"", listing(root, b".")]]
    while stack and count[0] <= caps["max_files"]:  # past the cap the host refuses anyway
        frame = stack[-1]
        dir_fd, prefix, names = frame
        if not names:
            os.close(dir_fd)
            stack.pop()
            continue
        name = names.pop()
        raw = os.fsencode(name)
        path = prefix + raw
        if (not prefix and raw == b".git") or raw in SKIP_NAMES or raw.endswith(b".pyc"):
            continue  # the sandbox's own git repo, and build artefacts of test runs
        try:
            st = os.lstat(name, dir_fd=dir_fd)
        except OSError:
            continue  # vanished while walking
        if stat.S_ISLNK(st.st_mode):
            record(b"L", path, os.fsencode(os.readlink(name, dir_fd=dir_fd)))
        elif stat.S_ISREG(st.st_mode):
            send_file(dir_fd, name, path, st)
        elif raw.lower().rstrip(b". ") == b".git":
            record(b"S", path, b"git metadata is never exported")  # a nested repo: one record, not its files
        elif not stat.S_ISDIR(st.st_mode):
            record(b"S", path, b"not a regular file, directory or symlink")
        elif len(stack) >= caps["max_depth"]:
            record(b"S", path, b"deeper than the directory depth cap")
        else:
            try:
                child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            except OSError as exc:
                record(b"S", path, ("unreadable directory: %s" % exc.strerror).encode())
                continue
            record(b"D", path, b"")
            stack.append([child, path + b"/", listing(child, path)])
    end = str(count[0]).encode()
    out.write(b"E" + struct.pack(">I", 0) + struct.pack(">Q", len(end)) + end)
    out.flush()


main()
