"""Fixtures for the replay tests: a real fault server on loopback, and the
store tests' real SQLite stores in tmp dirs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.fault_server import FaultServer
from tests.store.conftest import db_path, store  # noqa: F401 - re-exported fixtures


@pytest.fixture(scope="module")
def fault_server() -> Iterator[FaultServer]:
    with FaultServer() as server:
        yield server
