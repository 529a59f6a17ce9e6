"""The README's Python API example runs as printed, in a fresh interpreter,
against a real scripted model server, a real sandbox and a real store: only
the server URL is replaced (the model is scripted to fix the bug)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.adapters.fault_server import FaultServer
from store import Store
from tests.e2e.conftest import EXAMPLE
from tests.replay.recording import fixing_steps

pytestmark = [pytest.mark.docker]

ROOT = Path(__file__).resolve().parents[2]
README_URL = "http://127.0.0.1:8088/v1"


def readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Python API", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section.split("\n## ", 1)[0], flags=re.S)
    return code


def test_the_readme_example_runs_one_recorded_run(tmp_path: Path, fault_server: FaultServer, sandbox_image: str):
    code = readme_example()
    assert README_URL in code and "run_agent" in code and "import typer" not in code
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "calculator",
                    ignore=shutil.ignore_patterns(".benchmarks", "__pycache__", ".pytest_cache"))
    fault_server.script(fixing_steps())
    env = {**os.environ, "ESCROW_HOME": str(tmp_path / "home"), "ESCROW_SANDBOX_IMAGE": sandbox_image,
           "ESCROW_TOKENIZER": "cl100k_base", "ESCROW_CONTEXT_WINDOW": "8192", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code.replace(README_URL, fault_server.base_url)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    # stdout holds only what the example prints; the run's log lines (the
    # runtime it chose) go to stderr although the caller configured no logging.
    run_id, verdict = done.stdout.splitlines()[0].split()
    assert "sandbox runtime" in done.stderr and "sandbox runtime" not in done.stdout
    assert verdict == "PASS" and "calc.py" in done.stdout  # the patch is printed
    with Store.open(f"sqlite:///{tmp_path / 'home' / 'escrow.db'}", readonly=True, create=False) as store:
        assert store.run(run_id).verdict == "PASS" and store.verify(run_id).ok
    assert "typer" not in subprocess.run(
        [sys.executable, "-c", "import sys, orchestrator.composition.launch; print(' '.join(sys.modules))"], cwd=ROOT,
        capture_output=True, text=True, check=True).stdout.split()
