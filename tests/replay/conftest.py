"""Fixtures for the replay tests: a real fault server on loopback and real
SQLite stores in tmp dirs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.fault_server import FaultServer
from store import Store


@pytest.fixture(scope="module")
def fault_server() -> Iterator[FaultServer]:
    with FaultServer() as server:
        yield server


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "escrow.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{db_path}") as opened:
        yield opened
