"""Screenshots of `escrow view` for docs/VIEW.md: the run page's transcript
and internals, the compare page and a batch page, at 1280 and 800 pixels
wide, in Debian's chromium through Playwright.

The runs are recorded for real into a throwaway SQLite store: the turn loop
and ModelClient against the fault server, with the in-memory tools the
viewer's tests use (tests/view/recorded.py), a batch whose attempts are
those runs, and a synthetic run marked IMPORTED. The viewer is served by uvicorn on a loopback port.

    .venv/bin/python scripts/view_screenshots.py [--out docs/img] [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the recording helpers live with the tests

from orchestrator.adapters.fault_server import FaultServer  # noqa: E402
from store import Recorder, Store  # noqa: E402
from store.write import batches as bstore  # noqa: E402
from store.write import synthetic  # noqa: E402
from tests.replay.recording import fixing_steps, record_memory_run  # noqa: E402
from tests.view.conftest import serving  # noqa: E402
from tests.view.recorded import record_denial_run, record_fork, record_patch  # noqa: E402

WIDTHS = (1280, 800)
HEIGHT = 900
TALL = 2400
"""The most of a page a shot keeps (a whole run page is many screens)."""


def record(db: Path) -> dict[str, str]:
    """The runs and the batch the shots show, by what they are."""
    with Store.open(f"sqlite:///{db}") as store, FaultServer() as server:
        batch = bstore.create_batch(store, task_file="tasks/calculator.jsonl", settings={"workers": 1},
                                    tasks={"fix-mean": (1, {"id": "fix-mean"}), "fix-mean-again": (2, {"id": "x"})})
        attempt = bstore.start_attempt(store, batch, "fix-mean")
        run = record_denial_run(store, server)
        bstore.finish_attempt(store, attempt, outcome=bstore.MODEL, run_id=run, verdict="PASS", error=None)
        server.reset()
        attempt = bstore.start_attempt(store, batch, "fix-mean-again")
        other = record_memory_run(store, server, fixing_steps(extra_reads=1))
        record_patch(store, other)
        bstore.finish_attempt(store, attempt, outcome=bstore.MODEL, run_id=other, verdict="PASS", error=None)
        server.reset()
        parent, fork = record_fork(store, server)
        recorder = Recorder(store)  # an imported run reads neutral in the list, not failed
        imported = synthetic.record_run(recorder, turns=1, seed=5, finish=False)
        recorder.finish_run(imported, "IMPORTED", "imported from a trajectory file", turn=1)
    return {"run": run, "other": other, "parent": parent, "fork": fork, "batch": batch}


def shoot(base: str, ids: dict[str, str], out: Path, chromium: str) -> list[Path]:
    from playwright.sync_api import sync_playwright

    shots = {
        "run": (f"/run/{ids['run']}", None),
        "internals": (f"/run/{ids['run']}?view=internals", "#turn-1"),
        "search": (f"/run/{ids['run']}?q=.git/config", "#turn-1"),
        "compare": (f"/compare?a={ids['parent']}&b={ids['fork']}", None),
        "batch": (f"/batch/{ids['batch']}", None),
        "runs": ("/", None),
    }
    written: list[Path] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        for width in WIDTHS:
            page = browser.new_page(viewport={"width": width, "height": HEIGHT})
            for name, (path, anchor) in shots.items():
                page.goto(base + path)
                page.wait_for_load_state("networkidle")  # the chain-check frame
                if name == "runs":
                    for run in (ids["run"], ids["other"]):
                        page.check(f"#runs tr[data-run='{run}'] input[name=run]")
                top = 0
                if anchor:
                    box = page.locator(anchor).bounding_box()
                    top = int(box["y"]) - 8 if box else 0
                full = page.evaluate("document.documentElement.scrollHeight")
                target = out / f"view-{name}-{width}.png"
                page.screenshot(path=target, full_page=True,
                                clip={"x": 0, "y": top, "width": width, "height": min(TALL, full - top)})
                written.append(target)
            page.close()
        browser.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "escrow.db"
        ids = record(db)
        with serving(db) as base:
            for path in shoot(base, ids, args.out, args.chromium):
                print(path)


if __name__ == "__main__":
    main()
