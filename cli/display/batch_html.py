"""The batch report as one self-contained HTML page (``escrow batch report
BATCH --html FILE``): inline style, no script, nothing fetched. Task ids,
errors and the task file name come from users and models: every one is escaped."""

from __future__ import annotations

from html import escape

from orchestrator.composition.batch.report import BatchReport
from orchestrator.costing.money import dollars

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;color:#222;padding:0 1em}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:.3em .5em;text-align:left}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.PASS{color:#176b2c;font-weight:600}.SUSPECT{color:#8a5a00;font-weight:600}.fail{color:#9b1c1c;font-weight:600}.infra{color:#8a5a00}
dl{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dt{color:#555}dd{margin:0}
td.err{font-family:monospace;font-size:.85em;white-space:pre-wrap;word-break:break-all;max-width:30em}
"""


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _row(cells: list[tuple[str, str]]) -> str:
    return "<tr>" + "".join(f"<td{f' class={chr(34)}{c}{chr(34)}' if c else ''}>{v}</td>" for c, v in cells) + "</tr>"


def batch_html(report: BatchReport) -> str:
    e = escape
    rate = "n/a" if report.pass_rate is None else f"{report.pass_rate:.1%}"
    summary = [
        ("Task file", e(report.task_file)), ("Tasks", str(report.n_tasks)),
        ("Done (model verdict)", str(report.done)), ("Passed", f"{report.passed}"),
        ("Suspect (not passes)", f'<span id="suspect">{report.suspect}</span>'),
        ("Pass rate", f'<span id="pass-rate">{rate}</span>'), ("Running", str(report.running)),
        ("Not started", str(report.not_started)), ("Infrastructure failures", str(report.infra_failures)),
        ("of which sandbox start timeouts", str(report.start_timeouts)), ("Task errors", str(report.task_errors)),
        ("Cost", f'<span id="cost">{dollars(report.cost_usd)}</span>'), ("Tokens", f"{report.tokens:,}"),
        ("Run time p50 / p95", f"{_seconds(report.p50_s)} / {_seconds(report.p95_s)}"),
    ]
    verdicts = "".join(_row([("", e(k or "-")), ("n", str(v))]) for k, v in sorted(report.verdicts.items()))
    tasks = "".join(_row([
        ("", e(t.task_id)), ("", e(t.outcome)),
        (t.verdict if t.verdict in ("PASS", "SUSPECT") else "infra" if t.outcome == "infrastructure" else "fail",
         e(t.verdict or "-")),
        ("n", str(t.attempts)), ("n", str(t.infra_failures)), ("n", _seconds(t.seconds)), ("n", f"{t.tokens:,}"),
        ("n", dollars(t.cost_usd)), ("", e(t.replica or "-")), ("", e((t.run_id or "-")[:12])),
        ("err", e(t.error or "")),
    ]) for t in report.tasks)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Escrow batch {e(report.batch_id)}</title><style>{STYLE}</style></head>
<body>
<h1>Batch <code>{e(report.batch_id)}</code></h1>
<dl>{"".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in summary)}</dl>
<h2>Model verdicts</h2>
<table id="verdicts"><thead><tr><th>Verdict</th><th>Tasks</th></tr></thead><tbody>{verdicts}</tbody></table>
<h2>Slowest and costliest</h2>
<p>Slowest: {e(", ".join(report.slowest) or "-")}<br>Costliest: {e(", ".join(report.costliest) or "-")}</p>
<h2>Tasks</h2>
<table id="tasks"><thead><tr><th>Task</th><th>Outcome</th><th>Verdict</th><th>Attempts</th><th>Infra failures</th>
<th>Time</th><th>Tokens</th><th>Cost</th><th>Replica</th><th>Run</th><th>Error</th></tr></thead>
<tbody>{tasks}</tbody></table>
</body></html>
"""
