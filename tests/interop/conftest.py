"""Interop test inputs and a fresh store per test.

Two kinds of input: Escrow's own small fixtures in tests/data/interop (always
there; an Inspect log is zipped from its ``NAME.eval.d`` folder), and real
sample files recorded by other agents, kept outside this repository in the
shared data folder (``$ESCROW_SHARED_DIR/interop``, else
``../shared/interop`` beside the checkout). Tests of real samples skip when
those files are absent: a data prerequisite, listed in docs/INTEROP.md."""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import pytest

from store import Store
from tests.conftest import require

REPO = Path(__file__).resolve().parents[2]
OWN = REPO / "tests" / "data" / "interop"
OWN_FILES = (
    "atif/slugify_v1_2.json",
    "atif/terminal_v1_6.json",
    "inspect/arith.eval",
    "mini-swe-agent/messages.traj.json",
    "mini-swe-agent/slugify_v1.json",
    "mini-swe-agent/slugify_v2.json",
    "openhands/hello_events.json",
    "swe-agent/listing_v0.traj",
    "swe-agent/slugify_v1.traj",
)
# The real sample files, as docs/INTEROP.md lists them (repository, path, commit); an
# openhands-v1 entry is a conversation folder (base_state.json and events/).
REAL_SAMPLES = (
    "atif/charset_normalizer.trajectory.json",
    "atif/doku.terminus2.trajectory.json",
    "inspect/2025-02-11T15-17-00-05-00_popularity_dPiJifoWeEQBrfWsAopzWr.eval",
    "inspect/custom.eval",
    "inspect/log_read_sample.eval",
    "mini-swe-agent/charset_normalizer.mini-swe-agent.trajectory.json",
    "mini-swe-agent/deepseek_lite_dev__sqlfluff__sqlfluff-2419.traj.json",
    "mini-swe-agent/deepseek_reasoner_dev__pvlib__pvlib-python-1606.traj.json",
    "mini-swe-agent/github_issue.traj.json",
    "mini-swe-agent/local.traj.json",
    "openhands/basic.json",
    "openhands/basic_interactions.json",
    "openhands/wrong_initial_state.json",
    "openhands-v1/3fdb316098bb48e1aa029ce56805792a",
    "openhands-v1/cd94562403b9487ebdd4018e3f531dfd",
    "swe-agent/6e44b9__sweagenttestrepo-1c2844.traj",
    "swe-agent/swe-agent__test-repo-i1.traj",
)


def real_samples_dir() -> Path:
    shared = os.environ.get("ESCROW_SHARED_DIR")
    return (Path(shared) if shared else REPO.parent / "shared") / "interop"


def real(relative: str) -> Path:
    """A real sample file; absent, a failure under CI=true (the samples are
    laid beside every checkout, CI's included, in ../shared/interop) and a
    skip elsewhere, naming what is missing and where the list is."""
    folder = real_samples_dir()
    require(folder.is_dir(), f"the real interop samples folder {folder} (fill it as docs/INTEROP.md "
            "'Real sample files' says, or set ESCROW_SHARED_DIR)")
    path = folder / relative
    require(path.is_file() or (path / "base_state.json").is_file(),
            f"the real interop sample {path} (see docs/INTEROP.md 'Real sample files')")
    return path


@functools.cache
def zipped_dir() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="escrow-interop-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def zip_folder(source: Path, target: Path) -> Path:
    """An Inspect .eval archive of ``source``'s files, byte-identical on every build."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            info = zipfile.ZipInfo(path.relative_to(source).as_posix(), date_time=(2026, 1, 4, 8, 0, 0))
            archive.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
    return target


def own(relative: str) -> Path:
    """One of Escrow's own fixtures (an ``.eval`` is zipped once per test process)."""
    if relative.endswith(".eval"):
        target = zipped_dir() / relative.replace("/", "__")
        return target if target.is_file() else zip_folder(OWN / f"{relative}.d", target)
    path = OWN / relative
    assert path.is_file(), f"missing fixture {path}"
    return path


def responses(store, run_id):
    return [c.response for c in store.calls(run_id) if c.response is not None]


def totals(store, run_ids) -> dict[str, int]:
    out = {"prompt": 0, "cached": 0, "completion": 0, "calls": 0}
    for run_id in run_ids:
        for r in responses(store, run_id):
            out["prompt"] += r.input_tokens
            out["cached"] += r.cached_input_tokens
            out["completion"] += r.output_tokens
            out["calls"] += 1
    return out


def sha256_of(path: Path) -> str:
    """A file's sha256; a conversation folder's is that of its manifest (each
    read file's relative path and sha256, in path order)."""
    if not path.is_dir():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(".json"))
    lines = "".join(f"{p.relative_to(path).as_posix()}\0{sha256_of(p)}\n" for p in files)
    return hashlib.sha256(lines.encode()).hexdigest()


@pytest.fixture
def store(tmp_path):
    with Store.open(f"sqlite:///{tmp_path / 'escrow.db'}") as opened:
        yield opened


@pytest.fixture
def cli_env(tmp_path, monkeypatch) -> str:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("ESCROW_DB_URL", url)
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path / "home"))
    return url
