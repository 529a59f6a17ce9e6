"""Fixtures for the replay tests: the store tests' real SQLite stores in tmp
dirs (the fault server comes from tests/conftest.py), and the recorded Docker
run that the live replay tests share."""

from __future__ import annotations

from tests.replay.test_live import docker_run as docker_run
from tests.store.conftest import db_path, store  # noqa: F401 - re-exported fixtures
