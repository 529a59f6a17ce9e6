"""A throwaway PostgreSQL cluster on a unix socket in a temporary directory
(as the store tests start one) that a test can stop and start again, to take
the store away in the middle of a batch."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile

from sqlalchemy import create_engine, text

from tests.batch.ray_cluster import free_port
from tests.store.test_postgres import pg_bin, unavailable


class PostgresServer:
    def __init__(self) -> None:
        bindir = pg_bin()
        if bindir is None:
            unavailable("no /usr/lib/postgresql/*/bin/initdb")
        self.bindir = bindir
        self.base = tempfile.mkdtemp(prefix="escrow-pg-ray-", dir="/tmp")
        self.data, self.port = os.path.join(self.base, "data"), free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # postgres refuses to run as root
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                unavailable("no postgres system user")
            os.chown(self.base, account.pw_uid, account.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.url = f"postgresql+psycopg://postgres@/escrow?host={self.base}&port={self.port}"

    def _pg(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=120)

    def create(self) -> PostgresServer:
        try:
            self._pg(f"{self.bindir}/initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "--no-sync",
                     "-E", "UTF8")
            self.start()
        except subprocess.CalledProcessError as exc:
            self.destroy()
            unavailable(f"the cluster did not start: {exc.stderr.decode(errors='replace')[-300:]}")
        admin = create_engine(f"postgresql+psycopg://postgres@/postgres?host={self.base}&port={self.port}",
                              isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text("CREATE DATABASE escrow"))
        admin.dispose()
        return self

    def start(self) -> None:
        self._pg(f"{self.bindir}/pg_ctl", "-D", self.data, "-w", "-l", os.path.join(self.base, "log"), "-o",
                 f"-k {self.base} -p {self.port} -c listen_addresses='' -c fsync=off -c max_connections=200",
                 "start")

    def stop(self, mode: str = "fast") -> None:
        self._pg(f"{self.bindir}/pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        subprocess.run([*self.as_user, f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(self.base, ignore_errors=True)
