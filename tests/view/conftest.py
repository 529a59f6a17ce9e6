"""Fixtures for the viewer tests: real SQLite stores, the viewer served by
uvicorn on a loopback port, and Debian's chromium driven by Playwright.
Screenshots go to ESCROW_TEST_ARTEFACTS (or a tmp folder), printed once."""

from __future__ import annotations

import hashlib
import inspect
import os
import shutil
import socket
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from store import SCHEMA_VERSION, Store
from store.write import synthetic
from tests.store.conftest import db_path as db_path
from tests.store.conftest import store as store


@pytest.fixture(scope="session")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ.get("ESCROW_TEST_ARTEFACTS") or tmp_path_factory.mktemp("view-screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nviewer screenshots in {folder}")
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(db_path: Path) -> Iterator[str]:
    """The viewer over the store at ``db_path``, opened read-only, on a free
    loopback port; yields its base URL."""
    import uvicorn

    from cli.view.app import create_app

    store = Store.open(f"sqlite:///{db_path}", create=False, readonly=True)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(store), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the viewer did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        store.close()


def generated_store(runs: int, seed: int, folder: Path) -> Path:
    """``runs`` synthetic runs of 1-2 turns recorded through the Recorder.
    Recording 2,000 runs takes minutes on a busy machine, so the file is kept
    in ESCROW_TEST_CACHE (default: the temp dir) under a name that changes
    with the generator's source and the schema version, and copied per session."""
    key = hashlib.sha256(inspect.getsource(synthetic).encode() + str(SCHEMA_VERSION).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("ESCROW_TEST_CACHE") or tempfile.gettempdir()) / f"escrow-view-{runs}-{seed}-{key}.db"
    if not cache.exists():
        partial = cache.with_suffix(f".{os.getpid()}.part")
        with Store.open(f"sqlite:///{partial}", synchronous="OFF") as store:
            synthetic.record_many(store, runs, turns=2, seed=seed)
        with sqlite3.connect(partial) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        os.replace(partial, cache)
    target = folder / "escrow.db"
    shutil.copy(cache, target)
    return target


@pytest.fixture(scope="session")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2,000 synthetic runs."""
    return generated_store(2000, 11, tmp_path_factory.mktemp("big"))


@pytest.fixture
def copy_store(tmp_path: Path):
    def copy(source: Path, name: str = "copy.db") -> Path:
        target = tmp_path / name
        shutil.copy(source, target)
        return target

    return copy

