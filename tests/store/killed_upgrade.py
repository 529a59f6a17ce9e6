"""An upgrade killed with SIGKILL at its Nth commit, in a child process, for
the resumable-migration tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import importlib, os, signal, sys
from sqlalchemy import event
from sqlalchemy.engine import make_url
from store.engine import make_engine
from store.schema.migrations import upgrade
url, kill_at, from_version, module, name, value = sys.argv[1:]
engine = make_engine(make_url(url), readonly=False)
commits = [0]
def counted(conn):
    commits[0] += 1
    if commits[0] == int(kill_at):
        os.kill(os.getpid(), signal.SIGKILL)
event.listen(engine, "commit", counted)
setattr(importlib.import_module(module), name, int(value))
upgrade(engine, int(from_version))
"""


def killed_upgrade(url: str, kill_at: int, from_version: int,
                   batch: tuple[str, str, int]) -> subprocess.CompletedProcess[bytes]:
    """Upgrade from ``from_version`` with ``module.NAME = value`` (a batch
    size), killed just before commit ``kill_at``."""
    module, name, value = batch
    args = [url, str(kill_at), str(from_version), module, name, str(value)]
    return subprocess.run([sys.executable, "-c", SCRIPT, *args], cwd=ROOT, capture_output=True)
