"""``escrow view`` works on imported runs: the static bundle has a page for
each, with the run's calls and observations."""

from __future__ import annotations

from typer.testing import CliRunner

from cli.main import app
from store.importer import import_file
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
