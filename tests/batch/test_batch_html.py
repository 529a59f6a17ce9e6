"""``escrow batch report BATCH --html FILE``: one self-contained page that
parses, carries the pass rate, the cost and the per-task table, and shows
hostile task ids and error text as text (escaped), never as markup. Checked
with the standard HTML parser and in real Chromium (no script runs, no
element injected, nothing fetched)."""

from __future__ import annotations

from html.parser import HTMLParser

from typer.testing import CliRunner

from cli.main import app
from store import Recorder, Store
from store.write import batches as bstore
from store.write import synthetic

HOSTILE = ['<script>window.pwned=1</script>', '"><img src=x onerror="window.pwned=2">', "a&b</td></tr><tr><td>x"]


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None
        self.table: str | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(attrs)
        if tag == "table":
            self.table = dict(attrs).get("id")
        if tag == "tr" and self.table == "tasks":
            self.rows.append([])
        if tag == "td" and self.table == "tasks":
            self.cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.rows[-1].append("".join(self.cell))
            self.cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self.cell is not None:
            self.cell.append(data)


def hostile_batch(tmp_path) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store.open(url) as store:
        recorder = Recorder(store)
        ids = ["plain-task", *HOSTILE]
        batch_id = bstore.create_batch(store, task_file="<b>tasks</b>.jsonl", settings={},
                                       tasks={t: (i + 1, {}) for i, t in enumerate(ids)})
        for i, task_id in enumerate(ids[:3]):
            run_id = synthetic.record_run(recorder, turns=2, seed=i)
            attempt = bstore.start_attempt(store, batch_id, task_id)
            bstore.finish_attempt(store, attempt, outcome=bstore.MODEL, run_id=run_id,
                                  verdict="PASS" if i < 2 else "FAULTED")
        attempt = bstore.start_attempt(store, batch_id, ids[3])
        bstore.finish_attempt(store, attempt, outcome=bstore.INFRASTRUCTURE, run_id=None, verdict="INFRA_ERROR",
                              error="SandboxStartTimeout: <script>window.pwned=3</script>")
    return url, batch_id


def test_html_report_parses_and_escapes(tmp_path):
    url, batch_id = hostile_batch(tmp_path)
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["batch", "report", batch_id, "--html", str(out), "--db", url])
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    parsed = Page()
    parsed.feed(text)
    parsed.close()
    assert "script" not in parsed.tags and "img" not in parsed.tags
    assert not any(name.startswith("on") for name, _ in parsed.attrs)
    assert "src" not in {name for name, _ in parsed.attrs} and "href" not in {name for name, _ in parsed.attrs}
    rows = [r for r in parsed.rows if r]
    assert [r[0] for r in rows] == ["plain-task", *HOSTILE]  # each id whole, in its own row, as text
    assert [r[2] for r in rows] == ["PASS", "PASS", "FAULTED", "INFRA_ERROR"]
    assert rows[3][1] == "infrastructure" and rows[3][-1] == "SandboxStartTimeout: <script>window.pwned=3</script>"
    body = "".join(parsed.text)
    assert "66.7%" in body and "<b>tasks</b>.jsonl" in body  # pass rate 2 of 3 model verdicts; file name as text
    assert "of which sandbox start timeouts" in body
    with Store.open(url, readonly=True) as store:
        cost = sum(s.totals.cost_usd or 0 for s in store.summaries([r.run.id for r in store.runs()]))
    assert f"${cost:.4f}" in body and cost > 0


def test_html_report_in_chromium_runs_nothing_hostile(tmp_path, page):
    url, batch_id = hostile_batch(tmp_path)
    out = tmp_path / "report.html"
    assert CliRunner().invoke(app, ["batch", "report", batch_id, "--html", str(out), "--db", url]).exit_code == 0
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    page.goto(out.as_uri())
    assert page.evaluate("window.pwned") is None
    assert page.locator("script, img").count() == 0
    assert page.locator("#tasks tbody tr").count() == 4
    assert page.locator("#tasks tbody tr").nth(1).locator("td").first.inner_text() == HOSTILE[0]
    assert page.locator("#pass-rate").inner_text() == "66.7%"
    assert fetched == [out.as_uri()]  # self-contained: nothing else loaded
