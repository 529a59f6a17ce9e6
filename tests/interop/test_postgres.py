"""Import, re-import, ``--by source`` and the ATIF export on PostgreSQL (a
throwaway cluster, the store tests' fixture)."""

from __future__ import annotations

from orchestrator.composition.launch.reports import report_runs
from policies.price_table import load_price_table
from store import Recorder, Store
from store.read.reports.atif_export import to_atif
from store.write import synthetic
from store.write.importer import import_file
from tests.interop.conftest import own
from tests.store.test_postgres import postgres_url  # noqa: F401  (the fixture)


def test_import_and_reports_on_postgresql(postgres_url, tmp_path):  # noqa: F811
    with Store.open(postgres_url) as store:
        escrow_run = synthetic.record_run(Recorder(store), turns=2, seed=9)
        imported = import_file(store, own("inspect/arith.eval"))
        assert import_file(store, own("inspect/arith.eval")).skipped
        run_id = imported.run_ids[0]
        assert store.verify(run_id).ok and store.verify(escrow_run).ok
        report = report_runs(store, by="source", since=None, until=None, prices=load_price_table(tmp_path))
        assert {g.key for g in report.groups} == {"escrow", "inspect"}
        assert to_atif(store.trajectory(run_id))["steps"]
