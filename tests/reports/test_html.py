"""The HTML report opens in headless Chromium and its charts are drawn: the
page's own script records each chart's laid-out bars, read back from the DOM
Chromium dumps after scripts ran."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from orchestrator.composition.launch.reports import report_run, report_runs
from orchestrator.costing import aggregate_html, run_html
from policies.price_table import load_price_table, set_price

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--virtual-time-budget=5000",
)


def rendered_dom(chromium: str, page: Path) -> str:
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [chromium, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=120, check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def charts(dom: str) -> dict[str, dict[str, str]]:
    found = {}
    for tag in re.findall(r"<svg [^>]*class=\"chart\"[^>]*>", dom):
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', tag))
        found[attrs["id"]] = attrs
    return found


def test_run_report_charts_render(chromium: str, scripted, home: Path, tmp_path: Path) -> None:
    set_price(home, "gemma-3-270m", {"input_per_mtok": 2.0, "output_per_mtok": 8.0})
    report = report_run(scripted.store, scripted.record(scripted.GROWING), load_price_table(home))
    page = tmp_path / "run.html"
    page.write_text(run_html(report), encoding="utf-8")
    assert "http" not in page.read_text().replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing to fetch
    dom = rendered_dom(chromium, page)
    assert 'data-charts-drawn="3/3"' in dom
    drawn = charts(dom)
    assert set(drawn) == {"tokens-per-turn", "cost-per-turn", "prefill-comparison"}
    # 4 turns x (cached, prefilled, completion); cached is 0 in turns 0 and 3, so 10 bars have height.
    assert drawn["tokens-per-turn"]["data-drawn-bars"] == "10"
    assert drawn["cost-per-turn"]["data-drawn-bars"] == "4"
    assert drawn["prefill-comparison"]["data-drawn-bars"] == "3"
    for attrs in drawn.values():
        assert attrs["data-rendered-size"] == "760x280"
        assert int(attrs["data-tallest-bar"]) > 100  # the largest value reaches most of the plot height


def test_aggregate_report_charts_render(chromium: str, scripted, home: Path, tmp_path: Path) -> None:
    set_price(home, "gemma-3-270m", {"input_per_mtok": 2.0})
    for turns in (scripted.GROWING, scripted.GROWING[:2]):
        scripted.record(turns)
    page = tmp_path / "agg.html"
    page.write_text(
        aggregate_html(report_runs(scripted.store, by="verdict", since=None, until=None, prices=load_price_table(home)))
    )
    dom = rendered_dom(chromium, page)
    assert 'data-charts-drawn="2/2"' in dom
    assert {k: v["data-drawn-bars"] for k, v in charts(dom).items()} == {"cost-per-group": "1", "tokens-per-group": "2"}


def test_a_chart_s_legend_sits_below_its_title_not_over_it() -> None:
    """The legend was drawn on the title's row from the right: a long legend
    (a run report's five series) ran over the title's words."""
    from orchestrator.costing.svg import Series, bar_chart

    names = ("prefilled tokens", "cached tokens", "output tokens", "reasoning tokens", "cumulative cost")
    stacks = [Series(name=n, color="#888", values=(1.0, 2.0)) for n in names]
    svg = bar_chart("c", "Tokens and cost per turn of a long run", ["1", "2"], stacks)
    title_baseline = int(re.search(r'<text x="\d+" y="(\d+)" class="title">', svg).group(1))
    keys = [int(y) for y in re.findall(r'<rect class="key" x="-?\d+" y="(\d+)"', svg)]
    assert len(keys) == len(names) and min(keys) > title_baseline  # a key's top is below the title's baseline


def test_report_tables_name_their_columns_in_words() -> None:
    """The tables' headings were the rows' raw keys (``cost_usd``)."""
    from orchestrator.costing.html import table

    head = table([{"turn": 1, "input_tokens": 5, "cost_usd": 0.1, "ttft_s": 0.2}]).split("</thead>")[0]
    assert re.findall(r"<th>(.*?)</th>", head) == ["turn", "input tokens", "cost ($)", "ttft (s)"]
