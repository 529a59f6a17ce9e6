"""The trusted reporter (sandbox/evidence_plugin.py) under a real pytest
process on the host, read back by the host's parser: what it writes for
each outcome, in collect mode, and against a plugin that rewrites reports.
End to end in the sandbox image: tests/e2e/test_run_evidence.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

from orchestrator.evidence import Required, judge, parse_channel, reporter_env, required_from_collection

TESTS = '''
import pytest

def test_passes():
    assert True

def test_fails():
    assert 1 == 2

def test_skips():
    pytest.skip("not here")

@pytest.mark.xfail
def test_expected_to_fail():
    assert False

@pytest.fixture
def broken():
    raise RuntimeError("setup broke")

def test_setup_fails(broken):
    pass
'''
REWRITER = '''
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome, report.longrepr = "passed", None
'''


def run_pytest(tmp_path: Path, mode: str, *args: str) -> tuple[int, bytes]:
    plugin_dir = tmp_path / "site"
    plugin_dir.mkdir(exist_ok=True)
    shutil.copy(Path(str(resources.files("sandbox").joinpath("evidence_plugin.py"))), plugin_dir / "escrow_evidence.py")
    channel = tmp_path / f"{mode}.jsonl"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(plugin_dir), "PYTHONDONTWRITEBYTECODE": "1",
           **reporter_env(str(channel), "collect" if mode == "collect" else "run")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=tmp_path / "repo", env=env, capture_output=True, timeout=120)
    return proc.returncode, channel.read_bytes() if channel.exists() else b""


def repo(tmp_path: Path, **files: str) -> None:
    (tmp_path / "repo").mkdir()
    for name, text in {"test_x.py": TESTS, **files}.items():
        (tmp_path / "repo" / name).write_text(text)


def test_each_outcome_is_written_from_the_raw_exception(tmp_path):
    repo(tmp_path)
    code, data = run_pytest(tmp_path, "run")
    channel = parse_channel(data)
    assert code == 1 and channel.starts == 1 and channel.ends == 1 and not channel.problems
    outcomes = {ident.split("::")[1]: t.outcome for ident, t in channel.tests.items()}
    assert outcomes == {"test_passes": "passed", "test_fails": "failed", "test_skips": "skipped",
                        "test_expected_to_fail": "failed", "test_setup_fails": "failed"}
    assert "assert 1 == 2" in channel.tests["test_x.py::test_fails"].message
    assert "setup broke" in channel.tests["test_x.py::test_setup_fails"].message


def test_collect_mode_lists_the_tests_that_must_pass(tmp_path):
    repo(tmp_path)
    code, data = run_pytest(tmp_path, "collect")
    required = required_from_collection(parse_channel(data))
    assert code == 0 and required is not None
    assert set(required.ids) == {"test_x.py::test_passes", "test_x.py::test_fails", "test_x.py::test_skips",
                                 "test_x.py::test_setup_fails"}  # not the xfail one


def test_a_conftest_that_rewrites_reports_does_not_change_the_channel(tmp_path):
    repo(tmp_path, **{"conftest.py": REWRITER})
    code, data = run_pytest(tmp_path, "run", "-k", "test_passes or test_fails")
    channel = parse_channel(data)
    assert code == 0  # pytest itself believes every test passed
    assert channel.tests["test_x.py::test_fails"].outcome == "failed"
    assert set(channel.deselected) == {"test_x.py::test_skips", "test_x.py::test_expected_to_fail",
                                       "test_x.py::test_setup_fails"}
    evidence = judge(code, False, channel, Required(ids=("test_x.py::test_passes", "test_x.py::test_fails")))
    assert not evidence.passed and "required test failed: test_x.py::test_fails" in evidence.reasons
