"""Batch tests: the example tasks, the keyed fault server as their model."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.batch.scripted import example_scripts
from orchestrator.settings import load_settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


@pytest.fixture(scope="session")
def fix_scripts():
    return example_scripts(EXAMPLES)


def batch_settings(home: Path, image: str):
    return load_settings(None, home=home, sandbox_image=image, context_window=8192, tokenizer="cl100k_base",
                         model="fault-model", max_turns=6)


@pytest.fixture
def settings(tmp_path, sandbox_image):
    return batch_settings(tmp_path / "home", sandbox_image)
