"""File operations (read, write, edit, list) on paths beneath the workspace.
Runs INSIDE the container, one of the executor's modules
(sandbox/guest_loader.py; stdlib only).

Each op runs in a forked child as the sandbox user. The child resolves the
path by hand on descriptors it holds (``walk``: every component opened with
O_NOFOLLOW, each symlink read and followed here, never by the kernel), sends
the resolved path to the executor, which sends it to the host as a P frame;
the host's verdict (the ACL, decided there) comes back as a V frame before
the child changes anything, and the op then runs on the descriptors that
resolution opened, so a link swapped in at any moment cannot redirect it.
"""

import json
import os
import select
import signal
import stat
import time

from sandbox.executor_channel import HEADER, send_json
from sandbox.executor_processes import REAPED, ROOT, become_sandbox_user, fork_child

SKIP_DIRS = {".git"}
MAX_LINKS = 40
WHOLE_READ = 16 << 20  # a file up to this is read whole; a larger one a chunk at a time (read_window)


class Refused(Exception):
    pass


class Resolved:
    """A path resolved beneath the workspace: descriptors of the directories
    down to the deepest one that exists, the missing directories below it,
    and the final name (None for the workspace itself)."""

    def __init__(self, stack, parts, missing, name):
        self.stack, self.parts, self.missing, self.name = stack, parts, missing, name

    @property
    def path(self):
        return "/".join([*self.parts, *self.missing, *([self.name] if self.name else [])]) or "."

    def parent(self, create=False):
        """The final name's directory, making the missing ones (after the verdict)."""
        for part in self.missing:
            if not create:
                raise Refused(f"cannot enter directory {part!r}: No such file or directory")
            try:
                os.mkdir(part, 0o755, dir_fd=self.stack[-1])
            except FileExistsError:
                pass
            self.stack.append(open_dir(self.stack[-1], part))
        self.missing = []
        return self.stack[-1]


def open_dir(dir_fd, name):
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        raise Refused(f"cannot enter directory {name!r}: {exc.strerror}") from None


def walk(rel):
    """Resolve ``rel`` beneath the workspace by hand: every component is
    opened with O_NOFOLLOW relative to a descriptor already held, and each
    symlink is read and followed here, never by the kernel, so a link swapped
    in at any moment cannot redirect the operation. Nothing is created."""
    if "\x00" in rel:
        raise Refused("path contains a NUL byte")
    stack = [os.open(ROOT, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    parts = []
    todo = absolute_beneath(rel) if rel.startswith("/") else split(rel)
    links = 0
    while todo:
        part = todo.pop(0)
        if part == "..":
            if not parts:
                raise Refused(f"{rel} resolves outside the workspace")
            parts.pop()
            os.close(stack.pop())
            continue
        try:
            st = os.stat(part, dir_fd=stack[-1], follow_symlinks=False)
        except FileNotFoundError:
            if ".." in todo:
                raise Refused(f"{rel} goes through a missing directory ({part}) and back") from None
            names = [part, *todo]
            return Resolved(stack, parts, names[:-1], names[-1])
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_LINKS:
                raise Refused(f"{rel}: too many levels of symbolic links")
            target = os.readlink(part, dir_fd=stack[-1])
            if target.startswith("/"):
                del stack[1:]
                parts = []
                todo = absolute_beneath(target, rel) + todo
            else:
                todo = split(target) + todo
            continue
        if not todo:
            return Resolved(stack, parts, [], part)
        if not stat.S_ISDIR(st.st_mode):
            raise Refused(f"cannot enter directory {part!r}: Not a directory")
        stack.append(open_dir(stack[-1], part))
        parts.append(part)
    return Resolved(stack, parts, [], None)


def split(path):
    return [p for p in path.split("/") if p not in ("", ".")]


def absolute_beneath(target, rel=None):
    if target != ROOT and not target.startswith(ROOT + "/"):
        raise Refused(f"{rel or target} resolves outside the workspace (to {target})")
    return split(target[len(ROOT):])


def open_final(where, flags, create=False):
    if where.name is None:
        raise Refused("path names the workspace itself, not a file")
    parent = where.parent(create=create)
    try:
        # O_NONBLOCK: opening a FIFO the model planted returns at once.
        fd = os.open(where.name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=parent)
    except OSError as exc:
        raise Refused(f"cannot open {where.path}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Refused("not a regular file")
    os.set_blocking(fd, True)
    return fd


def op_read(req, where):
    with os.fdopen(open_final(where, os.O_RDONLY), "rb") as fh:
        data = fh.read(WHOLE_READ + 1) if os.fstat(fh.fileno()).st_size <= WHOLE_READ else b""
        if not data or len(data) > WHOLE_READ:  # large (or grown since): streamed, never held whole
            fh.seek(0)
            return read_window(fh, req)
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines(keepends=True)
    start = max(req.get("start_line", 1), 1) - 1
    count = req.get("max_lines") or len(lines)
    raw = "".join(lines[start:start + count]).encode()
    cap = req["max_bytes"]
    return {"content": raw[:cap].decode("utf-8", errors="ignore"), "truncated": len(raw) > cap,
            "total_bytes": len(data), "total_lines": len(lines), "start_line": start + 1}


def read_window(fh, req):
    """A file over WHOLE_READ, read a chunk at a time: only the lines asked
    for are kept, up to the byte cap, the rest only counted (lines end at
    \n here). A 3 GB sparse file read whole held it several times over."""
    cap = req["max_bytes"]
    start = max(req.get("start_line", 1), 1) - 1
    stop = start + req["max_lines"] if req.get("max_lines") else None
    kept = bytearray()
    line = total = 0
    last = b"\n"
    while chunk := fh.read(1 << 20):
        total += len(chunk)
        last = chunk[-1:]
        pos = 0
        while pos < len(chunk):
            if (stop is not None and line >= stop) or len(kept) > cap:
                line += chunk.count(b"\n", pos)  # past the window: counted only
                break
            nl = chunk.find(b"\n", pos)
            end = len(chunk) if nl < 0 else nl + 1
            if line >= start:
                kept += chunk[pos:min(end, pos + cap + 1 - len(kept))]
            if nl < 0:
                break
            line += 1
            pos = end
    lines = line + (1 if total and last != b"\n" else 0)
    return {"content": bytes(kept[:cap]).decode("utf-8", errors="ignore"), "truncated": len(kept) > cap,
            "total_bytes": total, "total_lines": lines, "start_line": start + 1}


def op_write(req, where):
    data = req["content"].encode()
    # No O_TRUNC at open: a non-regular file found there is refused untouched.
    with os.fdopen(open_final(where, os.O_WRONLY | os.O_CREAT, create=True), "wb") as fh:
        fh.truncate()
        fh.write(data)
    return {"bytes": len(data)}


def op_edit(req, where):
    with os.fdopen(open_final(where, os.O_RDWR), "r+b") as fh:
        text = fh.read().decode("utf-8", errors="surrogateescape")
        old, new = req["old"], req["new"]
        count = text.count(old)
        if count == 0:
            raise Refused("anchor not found: old text does not occur in the file; read the file and copy it exactly")
        if count > 1:
            raise Refused(f"anchor is ambiguous: old text occurs {count} times; include more surrounding lines")
        at = text.index(old)
        fh.seek(0)
        fh.truncate()
        fh.write((text[:at] + new + text[at + len(old):]).encode("utf-8", errors="surrogateescape"))
    return {"line": text[:at].count("\n") + 1, "removed": old.count("\n") + 1, "added": new.count("\n") + 1}


def op_list(req, where):
    base = where.parent()
    first = os.dup(base) if where.name is None else open_dir(base, where.name)
    limit, depth = req["max_entries"], req["depth"]
    out, total = [], 0
    todo = [(first, [], 0)]
    while todo:
        fd, parts, level = todo.pop()
        try:
            for entry in sorted(os.listdir(fd)):
                st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
                kind = "/" if stat.S_ISDIR(st.st_mode) else ("@" if stat.S_ISLNK(st.st_mode) else "")
                total += 1
                if len(out) < limit:
                    out.append("/".join([*parts, entry]) + kind)
                if kind == "/" and level + 1 < depth and entry not in SKIP_DIRS:
                    todo.append((open_dir(fd, entry), [*parts, entry], level + 1))
        finally:
            os.close(fd)
    return {"entries": sorted(out), "total": total, "truncated": total > len(out)}


FILE_OPS = {"read": op_read, "write": op_write, "edit": op_edit, "list": op_list}


def file_child(req, to_parent, from_parent):
    """In the forked child, as the sandbox user: resolve, ask the host, act."""
    try:
        where = walk(req["path"])
        put(to_parent, {"resolved": where.path})
        if not get(from_parent).get("allow"):
            return {"ok": False, "denied": True}
        return {"ok": True, **FILE_OPS[req["op"]](req, where)}
    except Refused as exc:
        return {"ok": False, "error": str(exc)}
    except MemoryError:
        return {"ok": False, "error": "the operation needs more memory than the policy's limit allows"}
    except OSError as exc:
        return {"ok": False, "error": f"{exc.strerror or exc}"}


def put(fd, obj):
    data = json.dumps(obj).encode()
    view = memoryview(HEADER.pack(0, len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def get(fd):
    return json.loads(read_exact(fd, HEADER.unpack(read_exact(fd, HEADER.size))[1]))


def read_exact(fd, size):
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError()
        data += chunk
    return bytes(data)


def run_file_op(req, reader, arguments):
    """The op in a child of the sandbox user; its resolved path goes to the
    host, whose verdict (the ACL, decided there) comes back before any change."""
    started = time.monotonic()
    up, down = os.pipe(), os.pipe()  # child to executor, executor to child
    pid = fork_child(arguments)
    if pid == 0:
        code = 0
        try:
            os.close(up[0])
            os.close(down[1])
            # The command's memory limit too: gVisor has no OOM killer to stop a huge read.
            become_sandbox_user(arguments.address_space)
            put(up[1], file_child(req["file"], up[1], down[0]))
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(up[1])
    os.close(down[0])
    deadline = started + float(req["timeout_s"])
    ending = None
    reply = None
    try:
        reply, ending = from_child(up[0], reader, deadline)
        if reply is not None and "resolved" in reply:
            send_json("P", reply)
            verdict, ending = wait_verdict(reader, deadline)
            if verdict is None:
                reply = None
            else:
                put(down[1], verdict)
                reply, ending = from_child(up[0], reader, deadline)
    except (EOFError, ValueError, BrokenPipeError):
        reply = None
    finally:
        os.close(up[0])
        os.close(down[1])
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
        REAPED.pop(pid, None)
    return {"reply": reply, "ending": ending, "duration_s": round(time.monotonic() - started, 4)}


def from_child(fd, reader, deadline):
    """The child's next message, or None with why (timeout, cancel)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, "timeout"
        ready = select.select([fd, reader.fd], [], [], left)[0]
        if reader.fd in ready:
            reader.fill()
            if any(kind == "K" for kind, _ in reader.frames):
                reader.frames.clear()
                return None, "cancel"
        if fd in ready:
            return get(fd), None


def wait_verdict(reader, deadline):
    while True:
        frame = reader.next(max(deadline - time.monotonic(), 0))
        if frame is None:
            return None, "timeout"
        if frame[0] == "K":
            return None, "cancel"
        if frame[0] == "V":
            return json.loads(frame[1]), None

