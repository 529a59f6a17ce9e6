"""``--executor ray`` refuses what cannot work, in one clear line and before
a batch is recorded: a SQLite store (other nodes cannot reach it), an address
where no cluster answers, ``--address`` without ``--executor ray``."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.composition.batch.errors import RayUnavailable
from orchestrator.composition.batch.ray_executor import connect
from orchestrator.errors import ConfigError
from store import Store
from store.write import batches as bstore
from tests.batch.conftest import EXAMPLES
from tests.batch.ray_cluster import free_port
from tests.conftest import require


@pytest.fixture(scope="module", autouse=True)
def ray_installed():
    try:
        import ray  # noqa: F401
    except ImportError:
        require(False, "Ray (pip install 'escrow[ray]')")


def batch(tmp_path, *args: str):
    return CliRunner().invoke(app, ["batch", str(EXAMPLES / "tasks.jsonl"), *args],
                              env={"ESCROW_HOME": str(tmp_path)})


def test_a_sqlite_store_with_a_cluster_elsewhere_is_refused_before_a_batch_is_recorded(tmp_path):
    # 192.0.2.0/24 is reserved for documentation: no cluster answers there, none is asked.
    result = batch(tmp_path, "--executor", "ray", "--address", "192.0.2.1:6379")
    assert isinstance(result.exception, RayUnavailable) and result.exception.exit_code == 2
    assert "must be PostgreSQL" in str(result.exception)
    with Store.open(f"sqlite:///{tmp_path / 'escrow.db'}", readonly=True) as store:
        assert store.runs() == []
        assert bstore.resolve_batch(store, "") is None  # no batch row


@pytest.mark.parametrize("args", [["--executor", "ray"], ["--address", "127.0.0.1:6379"], ["--executor", "dask"]])
def test_executor_and_address_go_together(tmp_path, args):
    result = batch(tmp_path, *args)
    assert isinstance(result.exception, ConfigError), result.output


def test_an_address_where_nothing_listens_is_refused_at_once():
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(RayUnavailable, match=f"no Ray cluster answers at {address}"):
        connect(address, probe_s=2.0)
