"""The static bundle from file://, and bad input: unknown runs, a broken
chain, an older schema, and hostile text in tasks and tool output."""

from __future__ import annotations

import re
import sqlite3
import subprocess
from pathlib import Path

from orchestrator.adapters.fault_server import FaultServer
from store import Store
from tests.processes import IN_PROCESS, run_escrow
from tests.replay.recording import FIXED_MEAN
from tests.view.conftest import serving
from tests.view.recorded import ASSISTANT_TEXT, XSS, record_denial_run, record_fork, tamper


def escrow(*args: str) -> subprocess.CompletedProcess[str]:
    return run_escrow(None, *args, entry=IN_PROCESS)


def test_static_bundle_opens_from_file_urls(page, store: Store, db_path: Path, fault_server: FaultServer,
                                            tmp_path: Path, artefacts: Path) -> None:
    run_id = record_denial_run(store, fault_server)
    parent, fork = record_fork(store, fault_server)
    bundle = tmp_path / "bundle"
    done = escrow("view", "--export", str(bundle), "--db", f"sqlite:///{db_path}")
    assert done.returncode == 0, done.stderr
    assert (bundle / "index.html").exists() and (bundle / f"compare-{parent}-{fork}.html").exists()
    # Nothing in the bundle loads from a network address (recorded data, such
    # as a run's model URL, may mention one as text).
    for page_file in bundle.glob("*.html"):
        text = page_file.read_text()
        assert not re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//""", text, re.I), page_file.name
        assert not re.search(r"url\(\s*[\"']?\s*(?:https?:)?//", text, re.I), page_file.name
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto((bundle / "index.html").as_uri())
    assert page.locator("#runs tbody tr").count() == 3
    page.fill("#f-q", "no task has this text")
    assert page.locator("#runs tbody tr:not(.hidden)").count() == 0
    page.fill("#f-q", "")
    page.screenshot(path=artefacts / "bundle-index.png")
    page.click(f"tr[data-run='{run_id}'] a")
    assert page.url.startswith("file://") and page.url.endswith(f"run-{run_id}.html")
    assert ASSISTANT_TEXT in page.inner_text("#turn-0 .assistant")
    assert FIXED_MEAN in page.locator("#turn-2 .diff .add").first.inner_text()
    page.fill("#q", ".git/config")
    assert [s.get_attribute("id") for s in page.locator("section.turn:not(.hidden)").all()] == ["turn-1", "turn-2"]
    page.screenshot(path=artefacts / "bundle-run.png")
    page.goto((bundle / f"run-{fork}.html").as_uri())
    page.click("#compare-parent")
    assert page.locator("#aligned tr.first-divergence").get_attribute("id") == "turn-2"
    assert all(url.startswith("file://") for url in requests), requests


def test_unknown_run_is_a_404_page(
    page, store: Store, db_path: Path, fault_server: FaultServer, artefacts: Path
) -> None:
    record_denial_run(store, fault_server)
    with serving(db_path) as base:
        for path in ("/run/0123456789abcdef", "/run/0123456789abcdef/chain", "/compare?a=nope&b=nada", "/no/such/page"):
            response = page.goto(base + path)
            assert response is not None and response.status == 404, path
            assert "Not found" in page.inner_text("h1")
            assert ("no run" if "run" in path or "compare" in path else "nothing at") in page.inner_text(".banner")
        page.screenshot(path=artefacts / "not-found.png")
        # A host name other than loopback is refused (DNS rebinding).
        import httpx

        assert httpx.get(base + "/", headers={"Host": "attacker.example"}).status_code == 400


def test_broken_chain_shows_a_banner_and_still_renders(page, store: Store, db_path: Path, fault_server: FaultServer,
                                                       artefacts: Path) -> None:
    run_id = record_denial_run(store, fault_server)
    with serving(db_path) as base:
        page.goto(f"{base}/run/{run_id}")
        assert "verified" in page.frame_locator("iframe.chain-status").locator("#chain-verified").inner_text()
        assert page.locator(".banner.bad").count() == 0
    tamper(db_path, run_id)
    with serving(db_path) as base:
        # First view: the page is sent before the chain is checked; the frame
        # on it checks the chain and shows the broken link.
        page.goto(f"{base}/run/{run_id}")
        framed = page.frame_locator("iframe.chain-status").locator(".banner.bad")
        assert "Hash chain broken" in framed.inner_text() and "hash mismatch" in framed.inner_text()
        assert "(edited)" in page.inner_text("main") and ASSISTANT_TEXT in page.inner_text("#turn-0")
        page.screenshot(path=artefacts / "broken-chain.png")
        # Once checked, the page carries the banner itself.
        page.reload()
        banner = page.inner_text("main > .banner.bad")
        assert "Hash chain broken" in banner and "hash mismatch" in banner
        page.goto(f"{base}/run/{run_id}/chain")
        assert page.locator("tr.divergent", has_text="first broken link").count() == 1
    with serving(db_path) as base:
        import httpx

        # The order, without a browser: the first page names no verdict on
        # the chain; the frame's address checks it; then the page shows it.
        first = httpx.get(f"{base}/run/{run_id}").text
        assert 'iframe class="chain-status"' in first and "Hash chain broken" not in first
        assert "Hash chain broken" in httpx.get(f"{base}/run/{run_id}/verified").text
        again = httpx.get(f"{base}/run/{run_id}").text
        assert "Hash chain broken" in again and 'iframe class="chain-status"' not in again
        compared = httpx.get(f"{base}/compare", params={"a": run_id, "b": run_id}).text
        assert compared.count("Hash chain broken") == 2


def test_older_schema_gives_the_migrate_hint(store: Store, db_path: Path) -> None:
    store.close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("DELETE FROM escrow_migrations WHERE version = (SELECT MAX(version) FROM escrow_migrations)")
    done = escrow("view", "--db", f"sqlite:///{db_path}", "--port", "1")
    assert done.returncode == 5
    assert "escrow migrate" in done.stderr and "Traceback" not in done.stderr
    done = escrow("view", "--export", str(db_path.parent / "out"), "--db", f"sqlite:///{db_path}")
    assert done.returncode == 5 and "escrow migrate" in done.stderr


def test_script_in_a_task_and_a_tool_output_is_shown_as_text(
    page, store: Store, db_path: Path, fault_server: FaultServer, tmp_path: Path, artefacts: Path
) -> None:
    run_id = record_denial_run(store, fault_server, task=f"fix mean() {XSS}", text=f"I will print {XSS}")
    # A tool output carrying the payload, recorded as a tool's stdout would be.
    from store import Recorder

    recorder = Recorder(store)
    last = store.calls(run_id)[-1]
    assert last.turn is not None and last.response is not None
    with recorder.turn(run_id, last.turn + 1) as tx:
        call_id = tx.request(last.request())
        tx.envelope(call_id, last.response.envelope())
        candidate = tx.candidate(call_id, 5, {"name": "bash", "arguments": XSS})
        tx.tool_execution(candidate, tool="bash", arguments_json=XSS, decision="allow", rule="tools.bash",
                          reason=XSS, exit_code=0, stdout=XSS, stderr=XSS, duration_s=0.1, observation=XSS, ok=True)
    bundle = tmp_path / "bundle"
    assert escrow("view", "--export", str(bundle), "--db", f"sqlite:///{db_path}").returncode == 0
    with serving(db_path) as base:
        for url in (
            base + "/",
            f"{base}/run/{run_id}",
            f"{base}/run/{run_id}?q=script",
            (bundle / "index.html").as_uri(),
            (bundle / f"run-{run_id}.html").as_uri(),
        ):
            page.goto(url)
            assert page.evaluate("window.__xss") is None, url
            assert page.locator("main script, main img").count() == 0, url
            assert "<script>window.__xss = 1</script>" in page.inner_text("main"), url
        page.goto(f"{base}/run/{run_id}")
        assert page.locator("text=<img src=x").count() >= 3  # task, assistant text, tool output
        page.screenshot(path=artefacts / "xss-escaped.png")
        response = page.goto(base + "/")
        assert response is not None and "script-src 'none'" in response.headers["content-security-policy"]
    # Second line of defence: were a script to get past escaping, the page's
    # policy admits only the bundle's own scripts, by hash.
    planted = bundle / "planted.html"
    planted.write_text((bundle / f"run-{run_id}.html").read_text().replace(
        "<main>", "<main><script>window.__xss = 3</script><img src=x onerror=\"window.__xss = 4\">", 1))
    page.goto(planted.as_uri())
    page.fill("#q", ".git/config")
    assert page.evaluate("window.__xss") is None
    assert page.locator("section.turn:not(.hidden)").count() == 2  # the bundle's own script still runs


def test_cli_mistakes_are_one_line_errors(store: Store, db_path: Path) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = escrow("view", "--db", f"sqlite:///{db_path}", "--port", str(port))
    assert (
        done.returncode == 2 and f"cannot serve on 127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr
    )
    done = escrow("view", "somerun", "--db", f"sqlite:///{db_path}")
    assert done.returncode == 2 and "only taken with --export" in done.stderr
    done = escrow("view", "--export", str(db_path.parent / "out"), "nosuchrun", "--db", f"sqlite:///{db_path}")
    assert done.returncode == 6 and "no run" in done.stderr and "Traceback" not in done.stderr
