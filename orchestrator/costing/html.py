"""Self-contained HTML cost reports: inline CSS, inline SVG charts and one
small inline script that marks each chart with how many of its bars were
laid out with a non-zero size (so a headless browser can check the page
rendered). Nothing is fetched."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from itertools import accumulate
from typing import Any

from orchestrator.costing.aggregate import AggregateReport
from orchestrator.costing.money import dollars
from orchestrator.costing.run_cost import RunCost
from orchestrator.costing.svg import Series, bar_chart
from orchestrator.costing.tabular import aggregate_rows, comparison_lines, line_rows

CACHED, PREFILLED, OUTPUT, COST, CUMULATIVE = "#4c9a6a", "#d9822b", "#3b6fb6", "#8e5bb5", "#c0392b"
UNSPLIT = "#9a9a9a"  # a prompt whose cached share no server reported

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}
.chart .title{font-weight:600;font-size:13px}.chart .tick{font-size:11px;fill:#555}
.chart .axis{stroke:#888}.wide{overflow-x:auto}.warn{color:#a94400}.note{color:#555}
"""

# Records the laid-out size of each chart's bars once the page has rendered.
SCRIPT = """
window.addEventListener('load', function () {
  var charts = document.querySelectorAll('svg.chart'), ok = 0;
  charts.forEach(function (svg) {
    var drawn = 0, tallest = 0;
    svg.querySelectorAll('rect.bar').forEach(function (r) {
      var box = r.getBoundingClientRect();
      if (box.width > 0 && box.height > 0) { drawn++; }
      tallest = Math.max(tallest, box.height);
    });
    var size = svg.getBoundingClientRect();
    svg.setAttribute('data-drawn-bars', String(drawn));
    svg.setAttribute('data-tallest-bar', String(Math.round(tallest)));
    svg.setAttribute('data-rendered-size', Math.round(size.width) + 'x' + Math.round(size.height));
    if (drawn > 0) { ok++; }
  });
  document.body.setAttribute('data-charts-drawn', ok + '/' + charts.length);
});
"""


def table(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return "<p>no rows</p>"
    head = "".join(f"<th>{escape(heading(str(k)))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{escape(cell(v))}</td>" for v in row.values()) + "</tr>" for row in rows)
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def heading(key: str) -> str:
    """A column's name as a person reads it: ``cost_usd`` is ``cost ($)``,
    ``ttft_s`` is ``ttft (s)``, ``input_tokens`` is ``input tokens``."""
    for suffix, unit in (("_usd", " ($)"), ("_s", " (s)")):
        if key.endswith(suffix):
            key = key.removesuffix(suffix) + unit
    return key.replace("_", " ")


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def page(title: str, body: Sequence[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(body)
        + f"\n<script>{SCRIPT}</script>\n</body></html>\n"
    )


def warnings_html(warnings: Sequence[str]) -> str:
    return "".join(f'<p class="warn">warning: {escape(w)}</p>' for w in warnings)


def run_html(report: RunCost) -> str:
    labels = [str(line.turn) for line in report.turns]
    # A turn whose calls sent no cached count has its prompt drawn unsplit, not as all prefilled.
    split = ["cached_tokens" not in t.absent for t in report.turns]
    series = [
        Series(name="cached prompt", color=CACHED,
               values=tuple(float(t.cached_tokens if known else 0)
                             for t, known in zip(report.turns, split, strict=True))),
        Series(name="prefilled prompt", color=PREFILLED,
               values=tuple(float(t.prefilled_tokens if known else 0)
                             for t, known in zip(report.turns, split, strict=True))),
    ]
    if not all(split):
        series.append(Series(name="prompt, no cached count reported", color=UNSPLIT, values=tuple(
            float(0 if known else t.prompt_tokens) for t, known in zip(report.turns, split, strict=True))))
    series.append(Series(name="completion", color=OUTPUT,
                         values=tuple(float(t.completion_tokens) for t in report.turns)))
    tokens = bar_chart("tokens-per-turn", "Tokens per turn", labels, series)
    per_turn = [t.cost.total_usd for t in report.turns]
    cost = bar_chart(
        "cost-per-turn", "Cost per turn ($) and cumulative", labels,
        [Series(name="turn $", color=COST, values=tuple(per_turn))],
        line=Series(name="cumulative $", color=CUMULATIVE, values=tuple(accumulate(per_turn))), unit="",
    )
    body = [
        f"<h1>Run {escape(report.run_id)}</h1>",
        f'<p>model {escape(report.model)} · status {escape(report.status)} · verdict {escape(report.verdict or "-")}'
        f" · total {dollars(report.total.cost.total_usd)} · price table {escape(report.price_version)}</p>",
        warnings_html(report.warnings), tokens, cost,
    ]
    c = report.comparison
    if c is not None and c.prefilled_tokens is not None:
        body.append(
            bar_chart(
                "prefill-comparison",
                "Prompt tokens prefilled: no cache vs actual vs ideal cache",
                ["no cache", "actual", "ideal cache"],
                [
                    Series(
                        name="tokens",
                        color=PREFILLED,
                        values=(float(c.no_cache_tokens), float(c.prefilled_tokens), float(c.ideal_cache_tokens)),
                    )
                ],
            )
        )
    if c is not None:  # the sentences say when the prefill is not known (no chart of it)
        notes = "".join(f'<p class="note">{escape(line)}</p>' for line in comparison_lines(c))
        body.append("<h2>Cache comparison</h2>" + notes)
    body.append("<h2>Per turn</h2>" + table(line_rows(report)))
    return page(f"Escrow cost report {report.run_id}", body)


def aggregate_html(report: AggregateReport) -> str:
    labels = [g.key for g in report.groups]
    chart = bar_chart(
        "cost-per-group", f"Cost by {report.by} ($)", labels,
        [Series(name="$", color=COST, values=tuple(g.cost.total_usd for g in report.groups))],
    )
    split = [
        Series(name="cached prompt", color=CACHED, values=tuple(float(g.cached_tokens or 0) for g in report.groups)),
        Series(name="prefilled prompt", color=PREFILLED,
               values=tuple(float(g.prefilled_tokens or 0) for g in report.groups)),
    ]
    if any(g.prefilled_tokens is None for g in report.groups):  # not split where calls sent no cached count
        split.append(Series(name="prompt, no cached count reported", color=UNSPLIT, values=tuple(
            float(g.prompt_tokens - (g.cached_tokens or 0) if g.prefilled_tokens is None else 0)
            for g in report.groups)))
    tokens = bar_chart("tokens-per-group", f"Prompt tokens by {report.by}", labels, split)
    body = [
        f"<h1>Cost by {escape(report.by)}</h1>",
        f'<p class="note">price table {escape(report.price_version)}</p>',
        warnings_html(report.warnings), chart, tokens, "<h2>Groups</h2>" + table(aggregate_rows(report)),
    ]
    return page(f"Escrow cost report by {report.by}", body)
