"""The verifier's side of a refill with only what changed, run INSIDE a
verifier's container as the sandbox user (``python3 -I -S -c``; stdlib
only). Only ever run in a container that holds the starting copy and has
run nothing of the model's (``sandbox.refill``).

``manifest`` (argv[1]): every entry under /workspace but ``.git`` (which
the refill replaces whole), never following a symlink, one record each on
stdout: ``kind perm uid gid nlink mtime sha\\0path\\0`` where kind is f (a
regular file), l (a symlink), d (a directory) or o (anything else, or what
could not be read); sha is the git blob id of a file's content or a link's
target, ``-`` otherwise. The first record, kind u, gives the umask (as
perm), uid and gid this script runs with.

``apply`` (argv[1]): stdin is an 8-byte big-endian length, that many bytes
of NUL-separated relative paths to remove (each whole, a directory with
all it holds, a link as the link), then a tar; ``.git`` is removed, the
paths are removed, then tar extracts the rest of stdin into /workspace. Any
failure stops before tar runs.
"""

import hashlib
import os
import shutil
import stat
import struct
import sys

ROOT = b"/workspace"
CHUNK = 1 << 20


def blob_id(path, size):
    digest = hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as handle:
        while True:
            chunk = handle.read(CHUNK)
            if not chunk:
                return digest.hexdigest()
            digest.update(chunk)


def record(out, kind, st, sha, rel):
    out.write(b"%s %o %d %d %d %d %s\0%s\0" % (kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_nlink,
                                             int(st.st_mtime), sha, rel))


def manifest():
    out = sys.stdout.buffer
    mask = os.umask(0)
    os.umask(mask)
    out.write(b"u %o %d %d 0 0 -\0-\0" % (mask, os.getuid(), os.getgid()))
    stack = [b""]
    while stack:
        rel_dir = stack.pop()
        try:
            names = sorted(os.listdir(os.path.join(ROOT, rel_dir) if rel_dir else ROOT))
        except OSError:
            continue  # its record says "o" (below): it is removed whole
        for name in names:
            rel = os.path.join(rel_dir, name) if rel_dir else name
            if rel == b".git":
                continue
            path = os.path.join(ROOT, rel)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                try:
                    record(out, b"f", st, blob_id(path, st.st_size).encode(), rel)
                except OSError:
                    record(out, b"o", st, b"-", rel)
            elif stat.S_ISLNK(st.st_mode):
                target = os.readlink(path)
                record(out, b"l", st, hashlib.sha1(b"blob %d\0" % len(target) + target).hexdigest().encode(), rel)
            elif stat.S_ISDIR(st.st_mode) and os.access(path, os.R_OK | os.W_OK | os.X_OK):
                record(out, b"d", st, b"-", rel)
                stack.append(rel)
            else:
                record(out, b"o", st, b"-", rel)


def read_exactly(n):
    data = bytearray()
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            raise SystemExit("refill: stdin ended inside the list of paths to remove")
        data += chunk
    return bytes(data)


def remove(rel):
    parts = rel.split(b"/")
    if not rel or rel.startswith(b"/") or any(p in (b"", b".", b"..") for p in parts):
        raise SystemExit(f"refill: refusing to remove {rel!r}")
    path = os.path.join(ROOT, rel)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        os.chmod(path, 0o700)  # a directory left unwritable or unlistable is removed all the same
        shutil.rmtree(path)
    else:
        os.unlink(path)


def apply():
    (length,) = struct.unpack(">Q", read_exactly(8))
    paths = [p for p in read_exactly(length).split(b"\0") if p]
    for rel in [b".git", *paths]:
        remove(rel)
    os.execvp("tar", ["tar", "-x", "-C", "/workspace", "-f", "-"])


if __name__ == "__main__":
    {"manifest": manifest, "apply": apply}[sys.argv[1]]()
