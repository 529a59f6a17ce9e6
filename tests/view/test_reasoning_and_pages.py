"""Recorded reasoning (dimmed, collapsed, escaped), the volatile tail of each
request, and a long run's turns in pages, in Debian's chromium against the
viewer served over a real SQLite store, and in the static bundle."""

from __future__ import annotations

from pathlib import Path

from cli.view.static_bundle import export_bundle
from store import Store
from tests.view.conftest import serving
from tests.view.recorded import REASONING, XSS, record_reasoning_run


def test_reasoning_is_dimmed_collapsed_and_the_tail_shown(page, store: Store, db_path: Path, artefacts: Path) -> None:
    run_id = record_reasoning_run(store, turns=3)
    with serving(db_path) as base:
        page.goto(f"{base}/run/{run_id}")
        reasoning = page.locator("#turn-1 details.reasoning")
        assert reasoning.count() == 1
        assert reasoning.get_attribute("open") is None and not reasoning.locator("pre").is_visible()
        assert float(reasoning.evaluate("e => getComputedStyle(e).opacity")) < 1
        summary = reasoning.locator("summary").inner_text()
        assert "30 tokens" in summary and "not fed back" in summary
        reasoning.locator("summary").click()
        assert reasoning.locator("pre").inner_text() == f"{REASONING} (turn 1)"
        # Later turns show the request's tail, which the history does not keep,
        # among their escrow internals; the first shows it among the whole
        # request's messages.
        for turn in (1, 2):
            assert not page.locator(f"#turn-{turn} .tail").is_visible()
            page.click(f"#turn-{turn} details.internals > summary")
        assert page.inner_text("#turn-1 .tail").endswith("[turns left: 2; context tokens left: 3900]")
        assert page.inner_text("#turn-2 .tail").endswith("[turns left: 1; context tokens left: 3800]")
        assert page.locator("#turn-0 .tail").count() == 0
        assert "[turns left: 3; context tokens left: 4000]" in (
            page.locator("#turn-0 details").first.text_content() or ""
        )
        page.screenshot(path=artefacts / "run-reasoning.png", full_page=True)


def test_script_inside_reasoning_is_shown_as_text(page, store: Store, db_path: Path, tmp_path: Path) -> None:
    run_id = record_reasoning_run(store, turns=2, reasoning=XSS)
    export_bundle(store, tmp_path / "bundle", [run_id])
    with serving(db_path) as base:
        for url in (
            f"{base}/run/{run_id}",
            f"{base}/run/{run_id}?q=onerror",
            (tmp_path / "bundle" / f"run-{run_id}.html").as_uri(),
        ):
            page.goto(url)
            closed = page.locator("details.reasoning:not([open]) > summary")  # a search opens its hits
            for _ in range(closed.count()):
                closed.first.click()
            assert page.locator("details.reasoning").count() == 2, url
            assert page.locator("main script, main img").count() == 0, url
            assert page.evaluate("window.__xss") is None, url
            assert "<script>window.__xss = 1</script>" in page.locator("#turn-1 details.reasoning pre").inner_text(), (
                url
            )


def test_a_long_run_is_shown_fifty_turns_a_page(page, store: Store, db_path: Path, artefacts: Path) -> None:
    run_id = record_reasoning_run(store, turns=55)
    with serving(db_path) as base:
        page.goto(f"{base}/run/{run_id}")
        assert [s.get_attribute("id") for s in page.locator("section.turn").all()] == [f"turn-{n}" for n in range(50)]
        assert "turns 55\n" in page.inner_text(".kv")  # the run's own figures, not the page's
        page.locator("#turn-index a", has_text="52").click()
        assert page.url.endswith(f"/run/{run_id}?page=2#turn-52")
        assert [s.get_attribute("id") for s in page.locator("section.turn").all()] == [
            f"turn-{n}" for n in range(50, 56)
        ]
        # The first turn of a later page shows what the turn before it appended.
        assert "contents 49" in (page.locator("#turn-50 details.request").text_content() or "")
        page.click("#turn-50 details.internals > summary")
        assert page.inner_text("#turn-50 .tail").endswith("[turns left: 5; context tokens left: -1000]")
        page.screenshot(path=artefacts / "run-page-2.png", full_page=False)
        # A search looks through every turn, whatever the page.
        page.goto(f"{base}/run/{run_id}?q=contents+3")
        shown = [s.get_attribute("id") for s in page.locator("section.turn").all()]
        assert "turn-4" in shown and "turn-31" in shown and "turn-40" in shown
