"""The runs table at an 800-pixel window and at 1280, in Debian's chromium,
served and from a static bundle, over runs with a long model name, long
unbroken task text, markup in a task, the longest verdict and a fork: no
page scroll sideways, no cell cut or spilling into the next, and the run,
verdict, cost and task of every run on screen."""

from __future__ import annotations

import random
from pathlib import Path

from orchestrator.contract import Message
from store import Recorder, Store
from store.write import synthetic
from tests.view.conftest import serving
from tests.view.recorded import XSS
from tests.view.test_bundle_and_bad_input import escrow

LONG_MODEL = "hf.co/unsloth/DeepSeek-R1-Distill-Qwen-32B-GGUF:Q4_K_M-with-a-long-local-suffix"
TASKS = (
    f"fix mean() {XSS} and then " + "x" * 200,
    "a" * 300,
    "refactor the parser so that every error carries the line and column it was found at, " * 3,
)
KEY_COLUMNS = ("Run", "Verdict", "Cost", "Task")

# Every visible header and body cell of #runs: its box, and whether its
# content (elements and text) stays inside it; and the page's own width.
MEASURE = """() => {
  const seen = (el) => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== "hidden";
  const box = (r) => ({left: r.left, right: r.right, top: r.top, bottom: r.bottom});
  const spills = (cell) => {
    const outer = cell.getBoundingClientRect();
    const parts = [...cell.querySelectorAll("*")].filter(seen).map((el) => el.getBoundingClientRect());
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.textContent.trim()) continue;
      const range = document.createRange(); range.selectNodeContents(node);
      parts.push(...range.getClientRects());
    }
    return parts.some((r) => r.width > 0 && (r.left < outer.left - 1 || r.right > outer.right + 1));
  };
  const cells = (sel) => [...document.querySelectorAll(sel)].filter(seen).map((c) => ({
    text: c.innerText.trim().slice(0, 40), box: box(c.getBoundingClientRect()), spills: spills(c)}));
  return {
    page: document.documentElement.scrollWidth, window: window.innerWidth,
    heads: cells("#runs thead th"),
    rows: [...document.querySelectorAll("#runs tbody tr")]
      .map((row) => cells(`#runs tbody tr[data-run="${row.dataset.run}"] td`)),
  };
}"""


def record_hostile_runs(store: Store) -> list[str]:
    """Runs with priced turns whose model, task and verdict are as long as a
    store may hold, and a fork of the first."""
    recorder = Recorder(store)
    rng = random.Random(7)
    ids = []
    for index, task in enumerate(TASKS):
        run_id = recorder.start_run(task=task, repo="/work/example", model=LONG_MODEL, config={}, policy={},
                                    **({"mode": "fork", "parent_run_id": ids[0], "forked_at_turn": 1} if ids else {}))
        history: list[Message] = []
        for turn in range(2):
            synthetic.record_turn(recorder, run_id, turn, history, rng)
        recorder.finish_run(run_id, ("BUDGET_EXHAUSTED", "PASS", "FAULTED")[index], "layout", turn=2)
        ids.append(run_id)
    return ids


def check_layout(page, width: int) -> None:
    measured = page.evaluate(MEASURE)
    where = f"at {width} px"
    assert measured["window"] == width
    assert measured["page"] <= width, f"the page scrolls sideways {where}: {measured['page']} px"
    heads = measured["heads"]
    for cell in heads:
        assert 0 <= cell["box"]["left"] and cell["box"]["right"] <= width, f"header {cell['text']!r} off-screen {where}"
    shown = [cell["text"] for cell in heads]
    column = {key: next((i for i, text in enumerate(shown) if text.startswith(key)), None) for key in KEY_COLUMNS}
    assert None not in column.values(), f"a key column is left out {where}: {shown}"
    assert len(measured["rows"]) == len(TASKS)
    for row in measured["rows"]:
        assert len(row) == len(heads), f"a row's cells and the header's differ {where}"
        for cell, head in zip(row, heads, strict=True):
            assert 0 <= cell["box"]["left"] and cell["box"]["right"] <= width, f"{head['text']} cut {where}: {cell}"
            assert not cell["spills"], f"{head['text']} spills out of its cell {where}: {cell}"
        for left, right in zip(row, row[1:], strict=False):
            assert left["box"]["right"] <= right["box"]["left"] + 1, f"cells overlap {where}: {left} {right}"
        cost = row[column["Cost"]]["text"]
        assert cost.startswith("$"), f"no cost on screen {where}: {row}"


def test_runs_table_fits_800_and_1280_pixels(browser, store: Store, db_path: Path, tmp_path: Path,
                                             artefacts: Path) -> None:
    record_hostile_runs(store)
    bundle = tmp_path / "bundle"
    exported = escrow("view", "--export", str(bundle), "--db", f"sqlite:///{db_path}")
    assert exported.returncode == 0, exported.stderr
    with serving(db_path) as base:
        for width in (800, 1280):
            context = browser.new_context(viewport={"width": width, "height": 900})
            try:
                page = context.new_page()
                for name, url in (("served", base + "/"), ("bundle", (bundle / "index.html").as_uri())):
                    page.goto(url)
                    check_layout(page, width)
                    page.screenshot(path=artefacts / f"runs-layout-{name}-{width}.png", full_page=True)
                # At full width nothing is left out: all eight columns.
                if width == 1280:
                    assert page.locator("#runs thead th:visible").count() == 8
            finally:
                context.close()
