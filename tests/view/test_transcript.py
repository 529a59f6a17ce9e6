"""The run page as a transcript (issue 27, point 8): the task, the model's
words, each tool call with its whole output and the coloured patch lead;
the escrow's rows (hash-chain positions, transitions, ACL rules, event
JSON) are one click away. Hostile model and tool output stays text. A
search's hits are marked and open their disclosure; two runs picked on the
runs page are compared under names that say what they are; an imported run
reads neutral; a batch run links back to its batch and task; an absent
figure in the header reads absent. Served by uvicorn over real SQLite
stores, read over HTTP and in Debian's chromium."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

from cli.view.static_bundle import export_bundle
from orchestrator.adapters.fault_server import FaultServer
from store import Recorder, Store
from store.write import synthetic
from tests.replay.recording import EXAMPLE_REPO, FIXED_MEAN, call, record_memory_run, reply
from tests.reports.test_absent_figures import record_run as record_absent_run
from tests.view.batch_recorded import HOSTILE_TASK, record_batch
from tests.view.conftest import serving
from tests.view.recorded import ASSISTANT_TEXT, REASONING, XSS, record_denial_run, record_fork, record_reasoning_run

LONG = "".join(f"line {n} of a long tool output\n" for n in range(300))
INTERNALS = ("chainlink", "transitions", "acl", "event-data", "cand-internals", "tail")


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class Disclosed(HTMLParser):
    """For each element with one of ``INTERNALS`` among its classes, whether
    it is inside a <details> that is closed."""

    VOID = {"br", "img", "input", "meta", "link", "hr", "wbr"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, bool]] = []  # (tag, a closed <details>)
        self.found: list[tuple[str, bool]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        classes = (values.get("class") or "").split()
        hidden = any(closed for _, closed in self.stack)
        self.found += [(c, hidden) for c in classes if c in INTERNALS]
        if tag not in self.VOID:
            self.stack.append((tag, tag == "details" and "open" not in values))

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            if self.stack.pop()[0] == tag:
                break


def disclosed(html: str) -> list[tuple[str, bool]]:
    parser = Disclosed()
    parser.feed(html)
    return parser.found


def hostile_run(store: Store, server: FaultServer) -> str:
    """A run whose model writes script in its words and whose tools return
    script (a file holding it) and a long output."""
    files = {p.name: p.read_text() for p in EXAMPLE_REPO.glob("*.py")} | {"page.html": XSS, "long.txt": LONG}
    steps = [reply(call("read_file", path="page.html"), text=f"Reading it. {XSS}"),
             reply(call("read_file", path="long.txt")), reply(call("submit"))]
    return record_memory_run(store, server, steps, files=files)


def test_the_run_page_leads_with_the_transcript(store: Store, db_path: Path, fault_server: FaultServer) -> None:
    run_id = record_denial_run(store, fault_server)
    with serving(db_path) as base:
        status, html = get(f"{base}/run/{run_id}")
        assert status == 200
        main = html[html.index("<main>"):]
        # The reader's order: the task, the model's words, tool calls with their outputs, the patch.
        places = [main.index(s) for s in ('id="task"', ASSISTANT_TEXT, 'class="tool">list_files', "test_calc.py",
                                          'id="patch"')]
        assert places == sorted(places)
        assert 'class="badge bad">denied</span> <span class="why">.git/config matches deny glob' in main
        assert re.search(r'<pre class="diff">.*<span class="add">\+' + re.escape(FIXED_MEAN.strip()), main)
        found = disclosed(main)
        # Every escrow internal is there, and behind a closed disclosure.
        assert {c for c, _ in found} >= {"chainlink", "transitions", "acl", "event-data", "cand-internals"}
        assert [c for c, hidden in found if not hidden] == []
        # The internals tab: the same page with every turn's internals open.
        status, html = get(f"{base}/run/{run_id}?view=internals")
        assert status == 200 and 'id="internals-tab" href' in html
        assert html.count('<details class="internals" open>') == 4
        assert {c for c, hidden in disclosed(html) if not hidden} >= {"chainlink", "transitions", "acl"}


def test_hostile_model_and_tool_output_is_text_and_whole(page, store: Store, db_path: Path,
                                                         fault_server: FaultServer, tmp_path: Path) -> None:
    run_id = hostile_run(store, fault_server)
    export_bundle(store, tmp_path / "bundle", [run_id])
    with serving(db_path) as base:
        status, html = get(f"{base}/run/{run_id}")
        assert status == 200 and "<script>window.__xss" not in html and "<img src=x" not in html
        for url in (f"{base}/run/{run_id}", (tmp_path / "bundle" / f"run-{run_id}.html").as_uri()):
            page.goto(url)
            assert page.evaluate("window.__xss") is None, url
            assert page.locator("main script, main img").count() == 0, url
            assert XSS in page.inner_text("#turn-0 .assistant pre.words"), url
            output = page.locator("#turn-0 .observation pre.output")
            assert output.is_visible() and XSS in output.inner_text(), url
            # A long output is shown whole, in view (it scrolls in its box).
            long = page.locator("#turn-1 .observation pre.output")
            assert long.is_visible() and LONG.strip() in long.inner_text(), url


def test_search_hits_are_marked_and_their_disclosures_open(page, store: Store, db_path: Path,
                                                          tmp_path: Path) -> None:
    run_id = record_reasoning_run(store, turns=3)
    export_bundle(store, tmp_path / "bundle", [run_id])
    with serving(db_path) as base:
        # Served: the server marks the hits (the page runs no script).
        page.goto(f"{base}/run/{run_id}?q=TOO+MANY")
        marks = page.locator("section.turn mark")
        assert marks.count() == 3 and set(marks.all_inner_texts()) == {"too many"}
        for reasoning in page.locator("details.reasoning").all():
            assert reasoning.get_attribute("open") is not None
        assert page.locator("details.reasoning pre").first.is_visible()
        # A hit among the internals (the tail of each later request) opens them.
        page.goto(f"{base}/run/{run_id}?q=context+tokens+left")
        assert page.locator("#turn-1 details.internals mark").first.is_visible()
        assert page.locator("#turn-1 details.internals").get_attribute("open") is not None
        page.goto(f"{base}/run/{run_id}")
        assert page.locator("mark").count() == 0 and page.locator("details[open]").count() == 0
        # The bundle: its script marks and opens as the query is typed.
        page.goto((tmp_path / "bundle" / f"run-{run_id}.html").as_uri())
        assert page.locator("details.reasoning[open]").count() == 0
        page.fill("#q", "too many")
        assert page.inner_text("#matches") == "3 of 4 turns match"  # the fourth holds the verdict event
        assert page.locator("section.turn mark").count() == 3
        assert page.locator("details.reasoning pre").first.is_visible()
        assert REASONING.split(";")[0] in page.inner_text("#turn-0 details.reasoning pre")
        page.fill("#q", "")
        assert page.locator("section.turn mark").count() == 0
        assert page.locator("details.reasoning[open]").count() == 0


def test_two_runs_ticked_on_the_runs_page_are_compared(page, store: Store, db_path: Path,
                                                      fault_server: FaultServer) -> None:
    first = record_denial_run(store, fault_server)
    fault_server.reset()
    parent, fork = record_fork(store, fault_server)
    with serving(db_path) as base:
        page.goto(base + "/")
        page.check(f"#runs tr[data-run='{first}'] input[name=run]")
        page.check(f"#runs tr[data-run='{fork}'] input[name=run]")
        page.click("#compare-picked")
        assert page.url.startswith(base + "/compare?")
        sides = page.locator("#sides tbody tr")
        # Unrelated runs are named by id and model, the older one first; never "recorded / replayed".
        assert sides.nth(0).locator(".side-name").inner_text() == f"{first[:12]} (fault-model)"
        assert sides.nth(1).locator(".side-name").inner_text() == f"{fork[:12]} (fault-model)"
        main = page.inner_text("main")
        assert "recorded" not in main and "replayed" not in main
        # A fork and its parent, ticked in either order: parent first.
        page.goto(base + "/")
        page.check(f"#runs tr[data-run='{fork}'] input[name=run]")
        page.check(f"#runs tr[data-run='{parent}'] input[name=run]")
        page.click("#compare-picked")
        assert page.locator("#sides .side-name").all_inner_texts() == ["parent", "fork"]
        assert "(a = parent, b = fork)" in page.inner_text("main")
        assert page.locator("#aligned tr.first-divergence").get_attribute("id") == "turn-2"
        # One run ticked: one clear line, no comparison.
        page.goto(base + "/")
        page.check(f"#runs tr[data-run='{parent}'] input[name=run]")
        page.click("#compare-picked")
        assert "Tick two runs to compare (1 ticked)" in page.inner_text("#problem")


def test_a_replay_is_compared_as_recorded_and_replayed(store: Store, db_path: Path, fault_server: FaultServer) -> None:
    from orchestrator.replay import Replayer

    original = record_denial_run(store, fault_server)
    replayer = Replayer(store)
    replay = replayer.offline(replayer.load(original)).replay_run_id
    assert replay is not None
    with serving(db_path) as base:
        for query in (f"a={original}&b={replay}", f"run={replay}&run={original}"):
            status, html = get(f"{base}/compare?{query}")
            assert status == 200
            assert re.findall(r'class="muted side-name">([^<]*)<', html) == ["recorded", "replayed"], query


def test_imported_reads_neutral_and_a_batch_run_links_back(store: Store, db_path: Path) -> None:
    recorder = Recorder(store)
    imported = synthetic.record_run(recorder, turns=1, seed=5, finish=False)
    recorder.finish_run(imported, "IMPORTED", "imported from a trajectory file", turn=1)
    batch_id, runs = record_batch(store)
    with serving(db_path) as base:
        _, listing = get(base + "/")
        row = listing[listing.index(f'data-run="{imported}"'):]
        assert row[:row.index("</tr>")].count('<span class="badge neutral">IMPORTED</span>') == 1
        _, html = get(f"{base}/run/{imported}")
        assert '<span class="badge neutral">IMPORTED</span>' in html and 'id="batch-link"' not in html
        hostile_run_id = runs[HOSTILE_TASK][1]
        _, html = get(f"{base}/run/{hostile_run_id}")
        link = re.search(r'<p id="batch-link">Attempt 2 of task <a href="([^"]+)"><code>([^<]*)</code></a>\s*'
                         r'in batch <a href="([^"]+)">', html)
        assert link, html[:3000]
        task_href, task_text, batch_href = link.groups()
        assert batch_href == f"/batch/{batch_id}" and task_href.startswith(batch_href + "#task-")
        assert "<script>" not in task_text and "&lt;script&gt;" in task_text
        _, batch_page = get(base + batch_href)
        assert f'id="task-{task_text}"' in batch_page  # the anchor the link names, escaped alike


def test_the_task_anchor_of_a_batch_run_is_found_by_the_browser(page, store: Store, db_path: Path) -> None:
    _, runs = record_batch(store)
    with serving(db_path) as base:
        page.goto(f"{base}/run/{runs[HOSTILE_TASK][1]}")
        page.click("#batch-link a >> nth=0")
        assert page.locator("#matrix tr.task:target").get_attribute("data-task") == HOSTILE_TASK
        assert page.evaluate("window.__xss") is None


def test_the_header_reads_absent_for_a_count_no_server_sent(store: Store, db_path: Path) -> None:
    run_id = record_absent_run(store)
    with serving(db_path) as base:
        _, html = get(f"{base}/run/{run_id}")
    tokens = re.search(r'<span id="run-tokens">(.*?)</span>\n', html)
    assert tokens
    flat = " ".join(re.sub(r"<[^>]+>", "", tokens.group(1)).split())
    assert flat == "tokens in 1,200 · cached absent · prefilled absent · out 40"
