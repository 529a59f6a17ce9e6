"""Issue 42, group 1: the viewer shows an imported turn's time its source did
not record as absent ("-"), not "model 0.000s"."""

from __future__ import annotations

import re
from pathlib import Path

from cli.view.static_bundle import export_bundle
from store import Store
from store.write.importer import import_files
from tests.interop.conftest import real


def test_an_imported_turn_without_times_reads_absent(tmp_path: Path) -> None:
    with Store.open(f"sqlite:///{tmp_path / 'escrow.db'}") as store:
        done = list(import_files(store, [real("swe-agent/swe-agent__test-repo-i1.traj")]))
        run_id = done[0].run_ids[0]
        export_bundle(store, tmp_path / "bundle", [run_id])
    page = re.sub(r"<[^>]+>", "", (tmp_path / "bundle" / f"run-{run_id}.html").read_text(encoding="utf-8"))
    flat = " ".join(page.split())
    assert "model 0.000s" not in flat and "· model -" in flat
