"""A throwaway PostgreSQL cluster for the benches: Debian's postgresql
package, a unix socket in a fresh directory, fsync off, removed on exit (as
the store tests start theirs)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text


@contextmanager
def throwaway_postgres(parent: str = "/var/tmp", port: int = 25432) -> Iterator[str]:
    """The URL of an empty database ``escrow`` in a new cluster."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise SystemExit("PostgreSQL is not installed (apt-get install postgresql)")
    bindir = os.path.dirname(found[-1])
    base = tempfile.mkdtemp(prefix="escrow-bench-pg-", dir=parent)
    as_user: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        account = pwd.getpwnam("postgres")
        os.chown(base, account.pw_uid, account.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data = os.path.join(base, "data")
    try:
        subprocess.run([*as_user, f"{bindir}/initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-sync",
                        "-E", "UTF8"], check=True, capture_output=True)
        subprocess.run([*as_user, f"{bindir}/pg_ctl", "-D", data, "-w", "-l", os.path.join(base, "log"), "-o",
                        f"-k {base} -p {port} -c listen_addresses='' -c fsync=off -c shared_buffers=1GB "
                        "-c work_mem=256MB -c max_wal_size=8GB", "start"], check=True, capture_output=True)
        admin = create_engine(f"postgresql+psycopg://postgres@/postgres?host={base}&port={port}",
                              isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text("CREATE DATABASE escrow"))
        admin.dispose()
        yield f"postgresql+psycopg://postgres@/escrow?host={base}&port={port}"
    finally:
        subprocess.run([*as_user, f"{bindir}/pg_ctl", "-D", data, "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
