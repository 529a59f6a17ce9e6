"""Fixtures for the replay tests: the store tests' real SQLite stores in tmp
dirs (the fault server comes from tests/conftest.py)."""

from __future__ import annotations

from tests.store.conftest import db_path, store  # noqa: F401 - re-exported fixtures
