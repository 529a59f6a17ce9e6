"""``escrow view`` works on imported runs: the static bundle has a page for
each, with the run's calls and observations."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cli.main import app
from store.write.importer import import_file
from tests.interop.conftest import own

ONE_PER_FORMAT = (
    "swe-agent/slugify_v1.traj",
    "mini-swe-agent/messages.traj.json",
    "openhands/hello_events.json",
    "inspect/arith.eval",
    "atif/terminal_v1_6.json",
)


def test_view_bundle_renders_imported_runs(store, tmp_path, monkeypatch):
    run_ids = [r for relative in ONE_PER_FORMAT for r in import_file(store, own(relative)).run_ids]
    monkeypatch.setenv("ESCROW_DB_URL", f"sqlite:///{store.url}")
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path / "home"))
    out = tmp_path / "bundle"
    result = CliRunner().invoke(app, ["view", "--export", str(out)])
    assert result.exit_code == 0, result.output
    for run_id in run_ids:
        page = (out / f"run-{run_id}.html").read_text(encoding="utf-8")
        assert "IMPORTED" in page
    atif_page = (out / f"run-{run_ids[-1]}.html").read_text(encoding="utf-8")
    for call in store.calls(run_ids[-1]):
        assert f"{call.response.input_tokens:,}" in atif_page or str(call.response.input_tokens) in atif_page


def test_imported_actions_show_as_executed_by_the_source_with_their_outputs(store, tmp_path, monkeypatch):
    """No ACL decision was made on an imported action: neither `show` nor the
    viewer presents one (no "-" ACL badge, no empty escrow path), and the
    placeholder max_tokens 1 is shown as absent."""
    import html

    from cli.display.record import trajectory_header, turn_lines

    run_id = import_file(store, own("swe-agent/slugify_v1.traj")).run_ids[0]
    executions = store.tool_executions(run_id)
    assert executions and all(e.imported and e.decision is None for e in executions)
    lines = "\n".join(line for record in store.trajectory(run_id).turns for line in turn_lines(record))
    assert "executed by the source agent" in lines and "no transitions" not in lines
    assert "max_tokens absent" in lines and "max_tokens 1" not in lines
    assert "- by -" not in lines
    header = "\n".join(trajectory_header(store.trajectory(run_id)))
    assert "run-level (the source's own" in header, header
    assert "cost_usd 0.0187" in header and "prompt_tokens 2,410" in header, header
    for e in executions:
        assert f"output {len(e.observation.encode()):,} B, sha256 {e.observation_sha256[:16]}" in lines
    monkeypatch.setenv("ESCROW_DB_URL", f"sqlite:///{store.url}")
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path / "home"))
    out = tmp_path / "bundle"
    assert CliRunner().invoke(app, ["view", "--export", str(out)]).exit_code == 0
    page = (out / f"run-{run_id}.html").read_text(encoding="utf-8")
    assert page.count("executed by the source agent") == len(executions)
    assert "<b>ACL</b>" not in page and 'class="transitions"' not in page
    for e in executions:
        assert e.observation.splitlines()[0] in html.unescape(page)


def test_an_imported_runs_page_marks_its_cost_as_the_sources_own_or_absent(store):
    """The viewer's header: a SWE-agent run's tokens and dollars are its
    model_stats (run-level, no call gives them), marked as the source's; a
    run whose source recorded no dollars reads absent, not $0."""
    import re

    from starlette.testclient import TestClient

    from cli.view.app import create_app
    from orchestrator.costing.money import dollars
    from tests.interop.conftest import real

    path = real("swe-agent/6e44b9__sweagenttestrepo-1c2844.traj")
    stats = json.loads(path.read_bytes())["info"]["model_stats"]
    swe = import_file(store, path).run_ids[0]
    bare = import_file(store, real("mini-swe-agent/local.traj.json")).run_ids[0]
    client = TestClient(create_app(store))

    def header(run_id: str) -> str:
        page = client.get(f"/run/{run_id}").text
        found = re.search(r'<div class="kv" id="run-figures">(.*?)</div>', page, re.S)
        assert found, page[:2000]
        return " ".join(re.sub(r"<[^>]+>", " ", found.group(1)).split())

    shown = header(swe)
    assert f"in {stats['tokens_sent']:,}" in shown and f"out {stats['tokens_received']:,}" in shown, shown
    assert f"cost {dollars(stats['instance_cost'])} (the swe-agent source's own figures)" in shown, shown
    assert "cost absent (the mini-swe-agent source recorded none)" in header(bare)
