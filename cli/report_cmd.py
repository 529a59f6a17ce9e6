"""``escrow report``: what a run (or many runs) cost, turn by turn, and how
much the prefix cache saved against the chapter's formulas."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from cli.spans import parse_since
from cli.store_options import CONFIG_HELP, DB_HELP, emit_json
from orchestrator.costing import (
    GROUP_BY,
    AggregateReport,
    NothingToReport,
    RunCost,
    aggregate_html,
    aggregate_json,
    aggregate_rows,
    comparison_lines,
    line_rows,
    run_html,
    run_json,
    to_csv,
)
from orchestrator.errors import ConfigError
from orchestrator.settings import load_settings
from orchestrator.terminal_text import printable
from policies.price_table import PriceTable, load_price_table
from store.run_list import when

if TYPE_CHECKING:
    from store import Store

TURN_COLUMNS = (
    ("turn", "turn"), ("calls", "calls"), ("statuses", "status"), ("prompt_tokens", "prompt"),
    ("cached_tokens", "cached"), ("prefilled_tokens", "prefilled"), ("completion_tokens", "output"),
    ("resent_tokens", "re-sent"), ("cache_hit_ratio", "hit"), ("cost_usd", "$"), ("gpu_s", "gpu s"),
    ("ttft_s", "ttft s"), ("decode_s", "decode s"), ("tool_s", "tool s"), ("retries", "retries"),
    ("wait_s", "wait s"),
)


GROUP_COLUMNS = (
    ("runs", "runs"), ("calls", "calls"), ("prompt_tokens", "prompt"), ("cached_tokens", "cached"),
    ("prefilled_tokens", "prefilled"), ("completion_tokens", "output"), ("cache_hit_ratio", "hit"), ("cost_usd", "$"),
    ("cost_per_run_p50", "$/run p50"), ("cost_per_run_p95", "$/run p95"), ("tokens_per_run_p50", "tok/run p50"),
    ("tokens_per_run_p95", "tok/run p95"), ("ttft_s_p50", "ttft p50 s"), ("ttft_s_p95", "ttft p95 s"),
    ("gpu_s", "gpu s"), ("tool_s", "tool s"), ("retries", "retries"), ("wait_s", "wait s"),
)


def console() -> Console:
    # A pipe gets the full table rather than one folded to 80 columns.
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "200"))
    return Console(width=width, highlight=False, soft_wrap=False)


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def rich_table(title: str, rows: list[dict[str, Any]], columns: tuple[tuple[str, str], ...] | None = None) -> Table:
    columns = columns or tuple((k, k) for k in rows[0])
    table = Table(title=title, title_justify="left")
    for key, header in columns:
        table.add_column(
            header, justify="left" if key in ("statuses", "model", "day", "status", "verdict", "source") else "right"
        )
    for row in rows:
        # Cells are text, never markup, with terminal controls escaped (a task, a model name).
        table.add_row(
            *(Text(printable(cell(row[k]), newlines=False)) for k, _ in columns),
            style="bold" if "total" in (row.get("turn"), str(row.get(columns[0][0])).lower()) else None,
        )
    return table


def print_run(report: RunCost) -> None:
    out = console()
    out.print(Text(printable(f"run {report.run_id}  model {report.model}  status {report.status}  verdict "
                             f"{report.verdict or '-'}  price table {report.price_version}")))
    if report.last_alive_at is not None:
        out.print(Text(f"crashed: its process is gone; last alive {when(report.last_alive_at)}"))
    if report.engines:
        out.print(Text(printable(f"engine {'; '.join(report.engines)}")))
    for warning in report.warnings:
        out.print(f"[yellow]warning:[/] {escape(printable(warning))}")
    out.print(rich_table("cost per turn", line_rows(report), TURN_COLUMNS))
    t = report.total.cost
    out.print(f"total ${t.total_usd:.6f} = input ${t.input_usd:.6f} + cached input ${t.cached_input_usd:.6f}"
              f" + output ${t.output_usd:.6f} + GPU ${t.gpu_usd:.6f}")
    if report.comparison is not None:
        for line in comparison_lines(report.comparison):
            out.print(Text(printable(line)))


def print_aggregate(report: AggregateReport) -> None:
    out = console()
    out.print(f"price table {report.price_version}")
    if not report.include_replays:
        out.print("real spend only: replays, re-executions and forks' shared prefixes are left out (--include-replays)")
    for warning in report.warnings:
        out.print(f"[yellow]warning:[/] {escape(printable(warning))}")
    columns = ((report.by, report.by), *GROUP_COLUMNS)
    out.print(rich_table(f"cost by {report.by}", aggregate_rows(report), columns))


def parse_moment(flag: str, value: str | None, now: float) -> float | None:
    if value is None:
        return None
    try:
        return parse_since(value, now)
    except ValueError as exc:
        raise ConfigError(str(exc).replace("--since", flag)) from None


def write_html(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}", path=str(path)) from None
    Console(stderr=True).print(f"wrote {path}", highlight=False)


def load_context(db: str | None, config: Path | None) -> tuple[Store, PriceTable]:
    # The store (SQLAlchemy) loads when a report runs, not for --help or a usage error.
    from store import Store

    settings = load_settings(config, db_url=db)
    prices = load_price_table(settings.home)
    return Store.open(settings.store_url, create=False, readonly=True), prices


def report(
    run: str | None = typer.Argument(None, help="Run id or unique prefix; omit for an aggregate over runs."),
    since: str | None = typer.Option(
        None, "--since", help="Aggregate runs started since: a span (7d, 24h) or ISO date."
    ),
    until: str | None = typer.Option(None, "--until", help="Aggregate runs started before: a span ago or ISO date."),
    by: str = typer.Option("model", "--by", help=f"Group an aggregate by: {', '.join(GROUP_BY)}."),
    include_replays: bool = typer.Option(
        False,
        "--include-replays",
        help="Aggregate: also count replays, re-executions and forks' shared prefixes (no spend of their own).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    as_csv: bool = typer.Option(False, "--csv", help="Print CSV (per turn, or per group)."),
    html: Path | None = typer.Option(None, "--html", help="Also write a self-contained HTML report with charts."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Cost of one run per turn (tokens cached/prefilled/re-sent, $, TTFT,
    decode, tool time, retries) with the cache comparison, or an aggregate
    over runs with p50/p95 (all runs by model when neither RUN nor a window is
    given). Prices come from `escrow price`."""
    if as_json and as_csv:
        raise ConfigError("choose one of --json and --csv")
    if by not in GROUP_BY:
        raise ConfigError(f"--by takes one of {', '.join(GROUP_BY)}, not {by!r}")
    if run is not None and (since or until or by != "model" or include_replays):
        raise ConfigError(
            "--since, --until, --by and --include-replays aggregate over runs; they do not apply to one RUN"
        )
    now = time.time()
    since_ts, until_ts = parse_moment("--since", since, now), parse_moment("--until", until, now)
    from orchestrator.launch.reports import report_run, report_runs

    store, prices = load_context(db, config)
    with store:
        if run is not None:
            single = report_run(store, run, prices)
            emit(single, run_json(single), line_rows(single), as_json, as_csv)
            if html:
                write_html(html, run_html(single))
            return
        many = report_runs(store, by=by, since=since_ts, until=until_ts, prices=prices, include_replays=include_replays)
    if not many.groups:
        window = f" started in the window asked ({since or 'the start'} to {until or 'now'})" if since or until else ""
        raise NothingToReport(f"no runs with recorded model calls{window} in {store.url}")
    emit(many, aggregate_json(many), aggregate_rows(many), as_json, as_csv)
    if html:
        write_html(html, aggregate_html(many))


def emit(
    report: RunCost | AggregateReport, as_dict: dict[str, Any], rows: list[dict[str, Any]], as_json: bool, as_csv: bool
) -> None:
    if as_json:
        emit_json(as_dict)
    elif as_csv:
        typer.echo(to_csv(rows), nl=False)
    elif isinstance(report, RunCost):
        print_run(report)
    else:
        print_aggregate(report)


def register(app: typer.Typer) -> None:
    app.command("report")(report)

