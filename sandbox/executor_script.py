"""The sandbox's persistent executor. Runs INSIDE the container as its main
process (``python3 -I -S -c``; stdlib only), as root with only KILL, SETUID,
SETGID and SETPCAP (under gVisor also gVisor's SYS_ADMIN), and talks to the
host over the container's attached stdio, nothing else. Everything the
model asks for runs as the sandbox user in a forked child that first gives
up every capability, so a command can neither signal, trace nor read this
process (another uid, no capability, no inherited descriptor; under gVisor,
whose /proc shows another uid more than Linux does, a PID namespace of its
own: sandbox/command_namespace.py).

Frames, both ways: one kind byte, a 4-byte big-endian length, the payload.
Host to executor: R request (JSON), I stdin bytes and E end of stdin (each
led by its request's 4-byte id), K kill
the running request, V the host's verdict on a resolved path (JSON).
Executor to host: H hello (JSON), O stdout bytes, X stderr bytes, P a
resolved path awaiting the verdict (JSON), D the request's result (JSON).
A command's output only ever travels inside O and X frames: it cannot forge
a frame.

After every command, whatever its ending, kill(-1) ends every process but
init and this one (the only processes the sandbox user does not own), and
the result is sent only once /proc shows none left.

Over 400 lines: one script the container runs whole (``-c``, stdlib only),
until its split lands.
"""

import ctypes
import errno
import json
import os
import resource
import select
import signal
import stat
import struct
import sys
import time

ROOT = "/workspace"
UID = GID = 1000
CHUNK = 65536
HEADER = struct.Struct(">BI")
MAX_FRAME = 64 << 20
PR_CAPBSET_DROP, PR_SET_CHILD_SUBREAPER, CAP_LAST = 24, 36, 63
TERM_GRACE_S = 1.0  # a timed-out command gets TERM, then this long before KILL
REAP_LIMIT_S = 30.0
PENDING_CAP = 4 << 20  # stdin held for a slow command before the host is read no further
SKIP_DIRS = {".git"}
MAX_LINKS = 40

# The host's arguments (sandbox/hardening.py says why each differs under
# gVisor): the policy's memory in bytes, 0 for none (each command's
# RLIMIT_AS, and the most the guest may use while a command runs: gVisor has
# no OOM killer, and a guest over the cgroup ends the whole sandbox);
# "pidns" to give each child a PID namespace and /proc of its own
# (sandbox/command_namespace.py); and the policy's processes, 0 for none
# (under gVisor a command that holds them all is a fork bomb whose churn of
# host tasks would end the sandbox's kernel: it is killed).
ADDRESS_SPACE = int(sys.argv[2]) if len(sys.argv) > 2 else 0
PROCESSES = int(sys.argv[4]) if len(sys.argv) > 4 else 0
WHOLE_READ = 16 << 20  # a file up to this is read whole; a larger one a chunk at a time (read_window)
WATCH_S = 0.02  # how often the guest's memory and processes are read while a command runs
OWN_PID_NAMESPACES = len(sys.argv) > 3 and sys.argv[3] == "pidns"
_libc = ctypes.CDLL(None, use_errno=True)
_out = sys.stdout.buffer.raw if hasattr(sys.stdout.buffer, "raw") else sys.stdout.buffer
_in_fd = sys.stdin.fileno()


class Refused(Exception):
    pass


class HostGone(Exception):
    pass


# -- the channel -------------------------------------------------------------

def send(kind, payload):
    data = HEADER.pack(ord(kind), len(payload)) + payload
    view = memoryview(data)
    while view:
        view = view[os.write(_out.fileno(), view):]


def send_json(kind, obj):
    send(kind, json.dumps(obj).encode())


class Reader:
    """Frames from the host; ``poll`` reads what is there without blocking."""

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


# -- dropping to the sandbox user --------------------------------------------

def become_sandbox_user():
    """In a forked child: no capability in any set, the sandbox uid and gid."""
    with open("/proc/self/oom_score_adj", "w") as fh:  # the OOM killer takes commands first
        fh.write("1000")
    for cap in range(CAP_LAST + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
            os._exit(120)
    os.setgroups([])
    os.setresgid(GID, GID, GID)
    os.setresuid(UID, UID, UID)  # clears the permitted, effective and ambient sets


def fork_child():
    """os.fork, under gVisor into a new PID namespace. A failure ends the
    executor (the host then reports it broken): no child runs unhidden."""
    if OWN_PID_NAMESPACES:
        next_child_in_new_pid_namespace(_libc)  # noqa: F821 (sandbox/command_namespace.py, joined before)
    return os.fork()


# -- reaping -----------------------------------------------------------------

def others():
    """Live processes besides init and this one."""
    found = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, me):
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def reap_all():
    """kill(-1) is atomic against fork (a process with a pending SIGKILL
    cannot fork), so one pass stops a fork bomb too; repeated until /proc
    shows nobody, collecting our own children's zombies on the way."""
    deadline = time.monotonic() + REAP_LIMIT_S
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        collect_children()
        left = others()
        if not left:
            return 0
        if time.monotonic() > deadline:
            return len(left)
        time.sleep(0.002)


REAPED: dict = {}  # pid -> wait status, for children collected while reaping


def collect_children():
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = raw


def child_status(pid):
    """The wait status of ``pid`` if it has ended (collected here or earlier)."""
    if pid in REAPED:
        return REAPED.pop(pid)
    try:
        done, raw = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return REAPED.pop(pid, None)
    return raw if done else None


# -- commands ----------------------------------------------------------------

def spawn(argv, env, cwd):
    """Fork the command: its own session, the sandbox user, fds 0-2 only."""
    fds = [os.pipe(), os.pipe(), os.pipe()]
    pid = fork_child()
    if pid == 0:
        try:
            os.setsid()
            if OWN_PID_NAMESPACES:
                mount_own_proc(_libc)  # noqa: F821 (sandbox/command_namespace.py)
                argv = [*INIT, *argv]  # noqa: F821
            become_sandbox_user()
            if ADDRESS_SPACE:
                resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
            install_command_filter()  # noqa: F821 (sandbox/command_seccomp.py, joined before this script)
            os.dup2(fds[0][0], 0)
            os.dup2(fds[1][1], 1)
            os.dup2(fds[2][1], 2)
            os.closerange(3, 65536)
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        except BaseException as exc:
            try:
                os.write(2, f"escrow executor: cannot run {argv[0]}: {exc}\n".encode())
            finally:
                os._exit(127)
    os.close(fds[0][0])
    os.close(fds[1][1])
    os.close(fds[2][1])
    return pid, fds[0][1], fds[1][0], fds[2][0]


def run_command(req, reader):
    started = time.monotonic()
    pid, stdin_w, out_r, err_r = spawn(req["argv"], req["env"], req.get("cwd", ROOT))
    tag = struct.pack(">I", req["id"])  # stdin frames name their request
    wants_stdin = bool(req.get("stdin"))
    if not wants_stdin:
        os.close(stdin_w)
        stdin_w = None
    pending = bytearray()
    stdin_done = not wants_stdin
    readers = {out_r: "O", err_r: "X"}
    deadline = started + float(req["timeout_s"])
    flood_bytes = int(req["flood_bytes"])
    produced = 0
    status = None
    ending = None  # timeout | flood | cancel | memory | processes
    kill_at = None
    watched = started
    while readers or status is None:
        now = time.monotonic()
        if ending is None and status is None and now - watched >= WATCH_S:
            watched = now
            # over_memory and at_process_limit: sandbox/guest_watch.py, joined before.
            ending = ("memory" if over_memory(ADDRESS_SPACE) else  # noqa: F821
                      "processes" if at_process_limit(PROCESSES) else None)  # noqa: F821
            if ending is not None:
                # As the OOM killer would under runc: the command's processes
                # go (every one: kill(-1)), the sandbox stays.
                reap_all()
                spent = (f"memory ({ADDRESS_SPACE >> 20} MiB)" if ending == "memory"
                         else f"processes ({PROCESSES})")
                send("X", f"escrow: the sandbox's {spent} ran out; every process of this command was killed\n"
                     .encode())
        if ending is None and now >= deadline:
            ending = "timeout"
            kill_at = now + TERM_GRACE_S
            try:
                os.killpg(pid, signal.SIGTERM)
            except OSError:
                pass
        if kill_at is not None and now >= kill_at:
            reap_all()
            kill_at = None
        if status is None:
            status = child_status(pid)
            if status is not None:
                # The command ended: nothing it started may outlive it, and
                # its background processes would otherwise hold the pipes open.
                reap_all()
                kill_at = None
        if status is not None and not readers:
            break
        waits = [reader.fd, *readers] if len(pending) < PENDING_CAP else list(readers)
        writes = [stdin_w] if stdin_w is not None and pending else []
        timeout = WATCH_S if status is None and ADDRESS_SPACE else 0.05 if status is None else 0.5
        if ending is None:
            timeout = min(timeout, max(deadline - now, 0))
        ready_r, ready_w, _ = select.select(waits, writes, [], timeout)
        if reader.fd in ready_r:
            reader.fill()
        while reader.frames:
            kind, payload = reader.frames.pop(0)
            mine = payload[:4] == tag
            if kind == "I" and stdin_w is not None and mine:
                pending += payload[4:]
            elif kind == "E" and stdin_w is not None and mine:
                stdin_done = True
            elif kind == "K" and ending is None:
                ending = "cancel"
                reap_all()
        if ready_w:
            try:
                pending = pending[os.write(stdin_w, pending[:CHUNK]):]
            except BrokenPipeError:
                pending.clear()
                stdin_done = True
        if stdin_w is not None and stdin_done and not pending:
            os.close(stdin_w)
            stdin_w = None
        elif stdin_w is not None and status is not None:
            os.close(stdin_w)
            stdin_w = None
        for fd in [fd for fd in ready_r if fd in readers]:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                os.close(fd)
                del readers[fd]
                continue
            if produced <= flood_bytes:
                send(readers[fd], chunk)
            produced += len(chunk)
            if produced > flood_bytes and ending is None:
                ending = "flood"
                reap_all()
    left = reap_all()
    if status is None:
        code = None
    elif ending == "timeout":
        code = 124
    elif ending in ("memory", "processes"):
        code = 137
    elif os.WIFSIGNALED(status):
        code = 128 + os.WTERMSIG(status)
    else:
        code = os.WEXITSTATUS(status)
    return {"exit_code": code, "ending": ending, "left": left, "produced": produced,
            "duration_s": round(time.monotonic() - started, 4)}


# -- file operations ---------------------------------------------------------

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


def run_file_op(req, reader):
    """The op in a child of the sandbox user; its resolved path goes to the
    host, whose verdict (the ACL, decided there) comes back before any change."""
    started = time.monotonic()
    up, down = os.pipe(), os.pipe()  # child to executor, executor to child
    pid = fork_child()
    if pid == 0:
        code = 0
        try:
            os.close(up[0])
            os.close(down[1])
            become_sandbox_user()
            if ADDRESS_SPACE:  # the command's memory limit: gVisor has no OOM killer to stop a huge read
                resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
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


# -- the loop ----------------------------------------------------------------

def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # Orphans of commands come back to this process, which collects them.
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    reader = Reader(_in_fd)
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
                result = run_command(req, reader)
            elif req["op"] == "file":
                result = run_file_op(req, reader)
            elif req["op"] == "ping":
                result = {"pid": os.getpid(), "left": len(others())}
            else:
                result = {"error": f"unknown op {req['op']!r}"}
        except HostGone:
            reap_all()
            return
        send_json("D", {"id": req.get("id"), **result})


main()
