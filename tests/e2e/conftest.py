"""Fixtures for end-to-end runs: a real fault-injection model server on
loopback scripting the agent, a real Docker sandbox, a real SQLite store in a
temporary ESCROW_HOME, and a fresh copy of the example repository per test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.adapters.fault_server import FaultServer
from orchestrator.settings import Settings
from store import Store

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calculator"
VERIFIER = "python3 -m pytest -q"


@pytest.fixture
def fault(fault_server: FaultServer) -> FaultServer:
    return fault_server


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    target = tmp_path / "calculator"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns(".benchmarks", "__pycache__", ".pytest_cache"))
    return target


@pytest.fixture
def settings(tmp_path: Path, fault: FaultServer, sandbox_image: str) -> Settings:
    return Settings(
        home=tmp_path / "home", model_url=fault.base_url, model="gemma-3-270m", sandbox_image=sandbox_image,
        context_window=8192,
        tokenizer="cl100k_base", max_output_tokens=512, deadline_s=30.0,
    )


@pytest.fixture
def open_store(settings: Settings):
    """Opens the run's store read-only, after the run (the run creates it)."""
    opened: list[Store] = []

    def _open() -> Store:
        store = Store.open(settings.store_url, readonly=True, create=False)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()
