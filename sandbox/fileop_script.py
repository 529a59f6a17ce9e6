"""File operations run INSIDE the sandbox container as the sandbox user
(passed to ``python3 -c``; stdlib only). Request: JSON on stdin. Reply: JSON
on stdout, exit 0 on success and 1 on a tool error.

Every path is resolved with realpath inside the container, where a symlink
planted by an earlier command actually lives, and refused if it lands outside
the workspace; the resolved path is then opened component by component with
O_NOFOLLOW, so a link swapped in between the check and the open fails.

The ACL is decided on resolved paths: the host first asks for ``resolve``
(the path after every symlink, as a workspace-relative path), decides on it,
and then sends the op with that resolved path and ``resolved: true``; the op
refuses if the path no longer resolves to itself. No process of the model is
alive while a file op runs (every command's processes are reaped when it
ends), so nothing can race the two steps; the check is defence in depth.
"""

import json
import os
import stat
import sys

ROOT = "/workspace"
SKIP_DIRS = {".git"}


class Refused(Exception):
    pass


def resolve(rel, must_be_resolved=False):
    if "\x00" in rel:
        raise Refused("path contains a NUL byte")
    real = os.path.realpath(os.path.join(ROOT, rel))
    if real != ROOT and not real.startswith(ROOT + "/"):
        raise Refused(f"{rel} resolves outside the workspace (to {real})")
    parts = [p for p in real[len(ROOT):].split("/") if p]
    if must_be_resolved and parts != [p for p in rel.split("/") if p not in ("", ".")]:
        raise Refused(f"{rel} changed: it now resolves to {'/'.join(parts) or '.'}")
    return parts


def resolve_req(req):
    return resolve(req["path"], must_be_resolved=bool(req.get("resolved")))


def op_resolve(req):
    return {"resolved": "/".join(resolve(req["path"])) or "."}


def open_dir(parts, create=False):
    fd = os.open(ROOT, os.O_RDONLY | os.O_DIRECTORY)
    for part in parts:
        if create:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
        try:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            raise Refused(f"cannot enter directory {part!r}: {exc.strerror}") from None
        os.close(fd)
        fd = nxt
    return fd


def open_file(parts, flags, mode=0o644, create_dirs=False):
    if not parts:
        raise Refused("path names the workspace itself, not a file")
    dir_fd = open_dir(parts[:-1], create=create_dirs)
    try:
        return os.open(parts[-1], flags | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    except OSError as exc:
        raise Refused(f"cannot open {'/'.join(parts)}: {exc.strerror}") from None
    finally:
        os.close(dir_fd)


def read_all(fd):
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise Refused("not a regular file")
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def op_read(req):
    data = read_all(open_file(resolve_req(req), os.O_RDONLY))
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines(keepends=True)
    start = max(req.get("start_line", 1), 1) - 1
    count = req.get("max_lines") or len(lines)
    chosen = "".join(lines[start:start + count])
    cap = req["max_bytes"]
    raw = chosen.encode()
    return {"content": raw[:cap].decode("utf-8", errors="ignore"), "truncated": len(raw) > cap,
            "total_bytes": len(data), "total_lines": len(lines), "start_line": start + 1}


def write_text(parts, content):
    fd = open_file(parts, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, create_dirs=True)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Refused("not a regular file")
    with os.fdopen(fd, "wb") as fh:
        fh.write(content.encode())
    return len(content.encode())


def op_write(req):
    return {"bytes": write_text(resolve_req(req), req["content"])}


def op_edit(req):
    parts = resolve_req(req)
    text = read_all(open_file(parts, os.O_RDONLY)).decode("utf-8", errors="surrogateescape")
    old, new = req["old"], req["new"]
    count = text.count(old)
    if count == 0:
        raise Refused("anchor not found: old text does not occur in the file; read the file and copy it exactly")
    if count > 1:
        raise Refused(f"anchor is ambiguous: old text occurs {count} times; include more surrounding lines")
    at = text.index(old)
    result = text[:at] + new + text[at + len(old):]
    fd = open_file(parts, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "wb") as fh:
        fh.write(result.encode("utf-8", errors="surrogateescape"))
    return {"line": text[:at].count("\n") + 1, "removed": old.count("\n") + 1, "added": new.count("\n") + 1}


def op_list(req):
    base = resolve_req(req)
    limit, depth = req["max_entries"], req["depth"]
    out, total = [], 0
    stack = [(base, 0)]
    while stack:
        parts, level = stack.pop()
        fd = open_dir(parts)
        try:
            names = sorted(os.listdir(fd))
            for name in names:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                rel = "/".join(parts[len(base):] + [name])
                kind = "/" if stat.S_ISDIR(st.st_mode) else ("@" if stat.S_ISLNK(st.st_mode) else "")
                total += 1
                if len(out) < limit:
                    out.append(rel + kind)
                if kind == "/" and level + 1 < depth and name not in SKIP_DIRS:
                    stack.append((parts + [name], level + 1))
        finally:
            os.close(fd)
    return {"entries": sorted(out), "total": total, "truncated": total > len(out)}


OPS = {"resolve": op_resolve, "read": op_read, "write": op_write, "edit": op_edit, "list": op_list}


def main():
    req = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    try:
        reply = {"ok": True, **OPS[req["op"]](req)}
    except Refused as exc:
        reply = {"ok": False, "error": str(exc)}
    except OSError as exc:
        reply = {"ok": False, "error": f"{exc.strerror or exc}"}
    sys.stdout.write(json.dumps(reply))
    sys.exit(0 if reply["ok"] else 1)


main()
