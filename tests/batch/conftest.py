"""Batch tests: the example tasks, the keyed fault server as their model."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pytest

from orchestrator.composition.batch.scripted import example_scripts
from orchestrator.settings import load_settings
from tests.batch.pg_server import PostgresServer
from tests.batch.ray_cluster import RayCluster
from tests.conftest import require

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"


def subset_task_file(where: Path, ids: Iterable[str]) -> Path:
    """A task file in ``where`` of the example tasks ``ids``, their micro-repositories beside it."""
    ids = set(ids)
    path = where / "tasks.jsonl"
    lines = [line for line in (EXAMPLES / "tasks.jsonl").read_text().splitlines(True)
             if json.loads(line)["instance_id"] in ids]
    assert len(lines) == len(ids), "an id that is not an example task"
    path.write_text("".join(lines))
    for task_id in ids:
        (where / task_id).symlink_to(EXAMPLES / task_id)
    return path


@pytest.fixture(scope="session")
def fix_scripts():
    return example_scripts(EXAMPLES)


def batch_settings(home: Path, image: str):
    return load_settings(None, home=home, sandbox_image=image, context_window=8192, tokenizer="cl100k_base",
                         model="fault-model", max_turns=6)


@pytest.fixture
def settings(tmp_path, sandbox_image):
    return batch_settings(tmp_path / "home", sandbox_image)


@pytest.fixture(scope="module")
def ray_cluster_module(request):
    """One real two-node Ray cluster per test module (``RAY_HEAD_ENV`` in the
    module: Ray settings for its head node; ``RAY_CPUS``: each node's logical CPUs)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        require(False, "Ray (pip install 'escrow[ray]')")
    head_cpus, worker_cpus = getattr(request.module, "RAY_CPUS", (2, 2))
    cluster = RayCluster(head_cpus=head_cpus, worker_cpus=worker_cpus,
                         head_env=getattr(request.module, "RAY_HEAD_ENV", {})).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def ray_cluster(ray_cluster_module: RayCluster) -> RayCluster:
    ray_cluster_module.ensure_worker()  # a test before may have killed it
    return ray_cluster_module


@pytest.fixture(scope="module")
def postgres():
    server = PostgresServer().create()
    try:
        yield server
    finally:
        server.destroy()
