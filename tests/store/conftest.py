"""Fixtures for the store tests: real SQLite files in tmp dirs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from store import Recorder, Store
from store.write import synthetic


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "escrow.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store.open(f"sqlite:///{db_path}") as opened:
        yield opened


@pytest.fixture
def recorded(store: Store) -> tuple[Store, str]:
    return store, synthetic.record_run(Recorder(store))
