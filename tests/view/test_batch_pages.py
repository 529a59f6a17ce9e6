"""The batch pages in chromium, served and from a static bundle: the pass
rate, per-task rows linking to their runs, failures by verdict,
infrastructure failures apart, and hostile task ids and errors as text."""

from __future__ import annotations

import re
from pathlib import Path

from cli.view.static_bundle import export_bundle
from store import Store
from tests.view.batch_recorded import HOSTILE_TASK, INFRA_ERROR, record_batch
from tests.view.conftest import serving
from tests.view.recorded import XSS


def hostile_text_is_inert(page, where: str) -> None:
    assert page.evaluate("window.__xss") is None, where
    assert page.locator("main script, main img").count() == 0, where
    assert XSS in page.inner_text("main"), where


def check_batch_page(page, runs: dict[str, list[str | None]], where: str) -> None:
    assert page.inner_text("#pass-rate") == "67%" and page.inner_text("#passed") == "2", where
    assert page.locator("#matrix tr.task").count() == 4, where
    hostile = page.locator("#matrix tr.task").nth(2)
    assert hostile.get_attribute("data-task") == HOSTILE_TASK, where
    assert hostile.locator("td.attempt").count() == 2 and "infra" in hostile.locator("td.attempt").first.inner_text()
    assert page.locator("ul.failures[data-verdict='BUDGET_EXHAUSTED'] li").all_inner_texts() == [
        "fails run over budget"
    ]
    infrastructure = page.locator("#infrastructure tbody tr")
    assert infrastructure.count() == 1 and INFRA_ERROR in infrastructure.inner_text(), where
    hostile_text_is_inert(page, where)
    hostile.locator("td.result a").click()
    assert page.url.split("/")[-1].removeprefix("run-").removesuffix(".html") == runs[HOSTILE_TASK][1], where
    assert runs[HOSTILE_TASK][1] in page.inner_text("main")


def test_batch_page_served(page, store: Store, db_path: Path, artefacts: Path) -> None:
    batch_id, runs = record_batch(store)
    store.close()
    with serving(db_path) as base:
        page.goto(base + "/batches")
        row = page.locator(f"#batches tr[data-batch='{batch_id}']")
        assert row.count() == 1 and "67%" in row.inner_text()
        hostile_text_is_inert(page, "batches")
        page.screenshot(path=artefacts / "batches.png")
        row.locator("a").click()
        page.screenshot(path=artefacts / "batch.png", full_page=True)
        assert HOSTILE_TASK in page.inner_text("#matrix")
        check_batch_page(page, runs, "served")
        page.goto(f"{base}/batch/{batch_id[:10]}")
        page.click("#batch-runs")
        shown = {r.get_attribute("data-run") for r in page.locator("#runs tbody tr").all()}
        assert shown == {r for attempts in runs.values() for r in attempts if r}
        response = page.goto(f"{base}/batch/nosuchbatch")
        assert response is not None and response.status == 404 and "no batch" in page.inner_text(".banner")


def test_batch_page_in_the_static_bundle(page, store: Store, tmp_path: Path) -> None:
    batch_id, runs = record_batch(store)
    bundle = tmp_path / "bundle"
    export_bundle(store, bundle, [])
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto((bundle / "index.html").as_uri())
    page.click("header.top >> text=Batches")
    hostile_text_is_inert(page, "bundle batches")
    page.click(f"#batches tr[data-batch='{batch_id}'] a")
    check_batch_page(page, runs, "bundle")
    assert all(url.startswith("file://") for url in requests), requests
    # A bundle of one run links that run only; the batch's other runs are named, not linked.
    one = tmp_path / "one"
    export_bundle(store, one, [runs["fails"][0] or ""])
    page.goto((one / "batches.html").as_uri())
    page.click(f"#batches tr[data-batch='{batch_id}'] a")
    links = [a.get_attribute("href") for a in page.locator("#matrix a").all()]
    assert links == [f"run-{runs['fails'][0]}.html"] * 2
    hostile_text_is_inert(page, "bundle of one run")


def test_hostile_ids_cannot_name_a_file_outside_the_bundle(store: Store, db_path: Path, tmp_path: Path) -> None:
    import sqlite3

    from store import Recorder
    from store.write import synthetic

    run_id = synthetic.record_run(Recorder(store), turns=2, seed=8)
    batch_id, _ = record_batch(store)
    store.close()
    hostile = "../../escaped"
    with sqlite3.connect(db_path) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            columns = [c[1] for c in conn.execute(f"PRAGMA table_info({table})")]
            if "run_id" in columns:
                conn.execute(f"UPDATE {table} SET run_id = ? WHERE run_id = ?", (hostile + "-run", run_id))
        conn.execute("UPDATE runs SET id = ? WHERE id = ?", (hostile + "-run", run_id))
        conn.execute("UPDATE batches SET id = ? WHERE id = ?", (hostile + "-batch", batch_id))
        for table in ("batch_tasks", "batch_attempts"):
            conn.execute(f"UPDATE {table} SET batch_id = ? WHERE batch_id = ?", (hostile + "-batch", batch_id))
    bundle = tmp_path / "a" / "b" / "bundle"
    with Store.open(f"sqlite:///{db_path}", create=False, readonly=True) as opened:
        written = export_bundle(opened, bundle, [])
    assert all(path.resolve().parent == bundle.resolve() for path in written)
    assert not list(tmp_path.rglob("escaped*"))
    index = (bundle / "index.html").read_text() + (bundle / "batches.html").read_text()
    for name in re.findall(r'href="((?:run|batch)-[^"]+\.html)"', index):
        assert (bundle / name).exists(), name
