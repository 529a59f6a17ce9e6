"""``escrow report --by source``: imported runs grouped by their source
format beside Escrow's own, in SQL and in Python alike."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cli.main import app
from orchestrator.composition.launch.reports import report_runs
from orchestrator.costing.figures import group_key
from policies.price_table import load_price_table
from store import Recorder
from store.read.reports.aggregate_query import run_slices
from store.write import synthetic
from store.write.importer import import_file
from tests.interop.conftest import own


def prompt_of(store, run_ids):
    return sum(c.response.input_tokens for run_id in run_ids for c in store.calls(run_id))


def test_by_source_groups_imports_by_format_beside_escrow_runs(store, tmp_path):
    escrow_runs = [synthetic.record_run(Recorder(store), turns=2, seed=s) for s in (1, 2)]
    atif = import_file(store, own("atif/terminal_v1_6.json")).run_ids
    mini = import_file(store, own("mini-swe-agent/slugify_v1.json")).run_ids
    report = report_runs(store, by="source", since=None, until=None, prices=load_price_table(tmp_path))
    groups = {g.key: g for g in report.groups}
    assert set(groups) == {"escrow", "atif", "mini-swe-agent"}
    assert groups["escrow"].runs == 2 and groups["atif"].runs == 1 and groups["mini-swe-agent"].runs == 1
    for key, ids in (("escrow", escrow_runs), ("atif", atif), ("mini-swe-agent", mini)):
        assert groups[key].prompt_tokens == prompt_of(store, ids)
    with store.read() as conn:
        pieces = run_slices(conn, None, None)
    assert {group_key("source", p) for p in pieces} == set(groups)


def test_report_by_source_on_the_command_line(store, tmp_path, monkeypatch):
    synthetic.record_run(Recorder(store), turns=2, seed=3)
    import_file(store, own("inspect/arith.eval"))
    monkeypatch.setenv("ESCROW_DB_URL", f"sqlite:///{store.url}")
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(app, ["report", "--by", "source", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    keys = {g["source"] if "source" in g else g.get("key") for g in document["groups"]}
    assert keys == {"escrow", "inspect"}, document["groups"]
