"""`escrow view` in a real browser: Debian's chromium through Playwright,
against the viewer served by uvicorn over a real SQLite store. Each test
saves a screenshot of the page it checks."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from orchestrator.adapters.fault_server import FaultServer
from store import Store
from tests.replay.recording import FIXED_MEAN
from tests.view.conftest import serving
from tests.view.recorded import ASSISTANT_TEXT, record_denial_run, record_fork


def count(db: Path, where: str, *args: object) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM runs WHERE {where}", args).fetchone()[0])


def test_runs_page_filters_a_2000_run_store(page, big_store: Path, artefacts: Path) -> None:
    assert count(big_store, "1") == 2000
    with serving(big_store) as base:
        page.goto(base + "/")
        assert "2000 runs match" in page.inner_text("#count")
        assert page.locator("#runs tbody tr").count() == 50
        # The form, as a user fills it: a verdict and a model.
        page.select_option("select[name=verdict]", "PASS")
        page.select_option("select[name=model]", "qwen3-0.6b")
        page.click("button[type=submit]")
        expected = count(big_store, "verdict = ? AND \"gen_ai.request.model\" = ?", "PASS", "qwen3-0.6b")
        assert 0 < expected < 2000
        assert f"{expected} runs match" in page.inner_text("#count")
        verdicts = page.locator("#runs tbody tr td:nth-child(3)").all_inner_texts()
        models = page.locator("#runs tbody tr td:nth-child(4)").all_inner_texts()
        assert set(verdicts) == {"PASS"} and set(models) == {"qwen3-0.6b"}
        page.screenshot(path=artefacts / "runs-filtered.png", full_page=False)
        # Text search across tasks, with the filters kept; then the next page.
        page.fill("input[name=q]", "#12")
        page.click("button[type=submit]")
        expected = count(
            big_store, 'verdict = ? AND "gen_ai.request.model" = ? AND task LIKE ?', "PASS", "qwen3-0.6b", "%#12%"
        )
        assert f"{expected} run{'' if expected == 1 else 's'} match" in page.inner_text("#count")
        page.goto(base + "/?verdict=FAULTED&page=2")
        faulted = count(big_store, "verdict = 'FAULTED'")
        assert f"page 2 of {-(-faulted // 50)}" in page.inner_text("#count")
        assert set(page.locator("#runs tbody tr td:nth-child(3)").all_inner_texts()) == {"FAULTED"}
        # Sorted by turns, the most turns first; a turn bound excludes the rest.
        page.goto(base + "/?sort=turns&order=desc&min_turns=2")
        assert (
            f"{count(big_store, 'id IN (SELECT run_id FROM turns GROUP BY run_id HAVING COUNT(*) >= 2)')} runs match"
            in page.inner_text("#count")
        )
        assert set(page.locator("#runs tbody tr td:nth-child(5)").all_inner_texts()) == {"2"}
        page.goto(base + "/?max_cost=0.00015")
        cheap = page.locator("#runs tbody tr td:nth-child(7)").all_inner_texts()
        assert cheap and all(float(c.lstrip("$")) <= 0.00015 for c in cheap)
        assert page.locator("select[name='batch'], #f-batch").count() >= 1, "the batch filter is offered"
        page.screenshot(path=artefacts / "runs.png", full_page=False)


def test_run_page_shows_assistant_text_a_diff_and_an_acl_denial(page, store: Store, db_path: Path,
                                                                  fault_server: FaultServer, artefacts: Path) -> None:
    run_id = record_denial_run(store, fault_server)
    with serving(db_path) as base:
        page.goto(f"{base}/run/{run_id}")
        assert ASSISTANT_TEXT in page.inner_text("#turn-0 .assistant")
        denied = page.locator("#turn-1 .cand.denied")
        assert denied.count() == 1
        assert "denied" in denied.locator(".call-line").inner_text() and ".git" in denied.inner_text()
        assert FIXED_MEAN in page.locator("#turn-2 .diff .add").first.inner_text()
        assert FIXED_MEAN in page.locator("pre.diff").last.inner_text()  # the run's patch
        # The ACL's rule, the escrow states and the chain positions are one click away.
        internals = page.locator("#turn-1 details.internals")
        assert not internals.locator(".cand-internals.denied .acl").is_visible()
        internals.locator("> summary").click()
        acl = internals.locator(".cand-internals.denied .acl").inner_text()
        assert "deny" in acl and "rule" in acl and acl.split("rule", 1)[1].strip() not in ("", "-")
        assert page.locator("#turn-2 .cand-internals .badge", has_text="COMMITTED").count() == 1
        # Every row links to its place in the hash chain.
        link = page.locator("#turn-1 a.chainlink").first
        href = link.get_attribute("href")
        assert href and href.startswith(f"/run/{run_id}/chain#seq-")
        page.screenshot(path=artefacts / "run.png", full_page=True)
        link.click()
        assert page.locator(f"tr#{href.split('#')[1]}").count() == 1
        assert "verified" in page.inner_text("main")
        # Search within the run keeps the turns that mention the text: the
        # denied write's turn, and the next, whose request carries its result.
        page.goto(f"{base}/run/{run_id}?q=.GIT/config")
        shown = [s.get_attribute("id") for s in page.locator("section.turn").all()]
        assert shown == ["turn-1", "turn-2"]
        assert "2 of 4 turns match" in page.inner_text("#matches")


def test_compare_page_highlights_the_divergent_turn_of_a_fork(page, store: Store, db_path: Path,
                                                              fault_server: FaultServer, artefacts: Path) -> None:
    parent, fork = record_fork(store, fault_server)
    with serving(db_path) as base:
        page.goto(f"{base}/run/{fork}")
        page.click("#compare-parent")
        highlighted = page.locator("#aligned tr.first-divergence")
        assert highlighted.count() == 1
        assert highlighted.get_attribute("id") == "turn-2"
        assert "sampling.temperature" in highlighted.inner_text()
        assert "turn 2" in page.inner_text("#divergence-summary")
        for earlier in ("turn-0", "turn-1"):
            assert "same" in page.inner_text(f"#aligned tr#{earlier}")
        page.screenshot(path=artefacts / "compare.png", full_page=True)
        # Two identical recordings: no divergence.
        page.goto(f"{base}/compare?a={parent}&b={parent}")
        assert "do not diverge" in page.inner_text("#divergence-summary")
