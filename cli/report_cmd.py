"""``escrow report``: what a run (or many runs) cost, turn by turn, and how
much the prefix cache saved against the prefix-cache formulas."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from cli.display.runtime_label import runtime_text
from cli.display.table import ABSENT, Column, figure, prose, render, terminal_width
from cli.spans import parse_since
from cli.store_options import CONFIG_HELP, DB_HELP, emit_json
from cli.usage import choices
from orchestrator.costing import (
    GROUP_BY,
    AggregateReport,
    CachedClamp,
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
from orchestrator.costing.figures import ESCROW_SOURCE
from orchestrator.costing.money import dollars
from orchestrator.errors import ConfigError
from orchestrator.settings import load_settings
from orchestrator.token_drift import TokenClass
from policies.price_table import PriceTable, load_price_table
from store.read.run_list import when

if TYPE_CHECKING:
    from store import Store

# Ranked for 80 columns: rank 1 fits, the higher ranks when there is room;
# --wide shows them all (stacked). JSON and CSV carry every field.
TURN_COLUMNS = (
    Column("turn", "turn", rank=0), Column("statuses", "status", "text"), Column("prompt_tokens", "prompt"),
    Column("cached_tokens", "cached"), Column("completion_tokens", "output"),
    Column("cache_hit_ratio", "hit", "ratio"), Column("cost_usd", "$", "usd"), Column("ttft_s", "ttft s", "seconds", 2),
    Column("prefilled_tokens", "prefilled", rank=2), Column("tool_s", "tool s", "seconds", 2),
    Column("calls", "calls", rank=3), Column("resent_tokens", "re-sent", rank=3),
    Column("gpu_s", "gpu s", "seconds", 3), Column("decode_s", "decode s", "seconds", 3),
    Column("retries", "retries", rank=3), Column("wait_s", "wait s", "seconds", 3),
)
GROUP_COLUMNS = (
    Column("runs", "runs"), Column("calls", "calls", rank=2), Column("prompt_tokens", "prompt"),
    Column("cached_tokens", "cached"), Column("prefilled_tokens", "prefilled", rank=2),
    Column("completion_tokens", "output"), Column("cache_hit_ratio", "hit", "ratio"),
    Column("cost_usd", "$", "usd", priority=1), Column("cost_per_run_p50", "$/run p50", "usd", 2),
    Column("cost_per_run_p95", "$/run p95", "usd", 2), Column("tokens_per_run_p50", "tok/run p50", rank=2),
    Column("tokens_per_run_p95", "tok/run p95", rank=3), Column("ttft_s_p50", "ttft p50 s", "seconds", 2),
    Column("ttft_s_p95", "ttft p95 s", "seconds", 3), Column("gpu_s", "gpu s", "seconds", 3),
    Column("tool_s", "tool s", "seconds", 3), Column("retries", "retries", rank=3),
    Column("wait_s", "wait s", "seconds", 3),
)


def say(lines: list[str]) -> None:
    typer.echo("\n".join(lines))


def print_run(report: RunCost, *, wide: bool = False, tokens: str | None = None, teacher: tuple[str, ...] = ()) -> None:
    width = terminal_width()
    lines = prose(f"run {report.run_id}  model {report.model}  status {report.status}  verdict "
                  f"{report.verdict or ABSENT}  price table {report.price_version}", width)
    if report.last_alive_at is not None:
        lines += prose(f"crashed: its process is gone; last alive {when(report.last_alive_at)}", width)
    if report.engines:
        lines += prose(f"engine {'; '.join(report.engines)}", width)
    if report.constraint is not None:
        lines += prose(f"constrained {report.constraint.text()}", width)
    if report.source == ESCROW_SOURCE:  # an imported run had no sandbox of Escrow's
        lines += prose(f"sandbox {runtime_text(report.sandbox_runtime)}", width)
    if tokens is not None:
        lines += prose(f"tokens {tokens} (escrow tokens)", width)
    lines += [line for text in teacher for line in prose(text, width)]
    lines += [line for warning in report.warnings for line in prose(f"warning: {warning}", width)]
    lines += [line for clamp in report.clamps for line in prose(clamp_note(clamp), width)]
    lines += ["", *render(TURN_COLUMNS, line_rows(report), width=width, wide=wide, title="cost per turn"), ""]
    t = report.total.cost
    if report.cost_basis == "price table":
        lines += prose(f"total {dollars(t.total_usd)} = input {dollars(t.input_usd)} + cached input "
                       f"{dollars(t.cached_input_usd)} + output {dollars(t.output_usd)} + GPU "
                       f"{dollars(t.gpu_usd)}", width)
    elif report.cost_basis == "absent":
        lines += prose(f"total absent: the {report.source} source recorded no dollars for this run (--reprice "
                       "prices its tokens with Escrow's table)", width)
    else:
        lines += prose(f"total {dollars(t.total_usd)}, the {report.source} source's own figures "
                       f"({report.cost_basis}; --reprice prices the tokens with Escrow's table)", width)
    if report.run_level_figures:
        counted = ", ".join(f"{name} {value:,}" if isinstance(value, int) else f"{name} {dollars(value)}"
                            for name, value in report.run_level_figures.items() if value is not None)
        lines += prose(f"of which run-level, as the source gives no per-call figure for them: {counted}", width)
    if report.source_totals:
        both = report.source_totals
        lines += prose("the source's run-level totals differ from its per-call figures: " + "; ".join(
            f"{name} {both['run_level'].get(name)} run-level, {both['per_call'].get(name)} per call"
            for name in both["per_call"]), width)
    if report.comparison is not None:
        for line in comparison_lines(report.comparison):
            lines += prose(line, width)
    say(lines)


def clamp_note(clamp: CachedClamp) -> str:
    where = "outside a turn" if clamp.turn is None else f"turn {clamp.turn}"
    return (f"clamped: {where}, the server reported {figure(clamp.reported)} cached tokens of a "
            f"{figure(clamp.counted)}-token prompt; counted as {figure(clamp.counted)}")


def print_aggregate(report: AggregateReport, *, wide: bool = False) -> None:
    width = terminal_width()
    lines = [f"price table {report.price_version}"]
    if not report.include_replays:
        lines += prose("real spend only: replays, re-executions and forks' shared prefixes are left out "
                       "(--include-replays)", width)
    lines += [line for warning in report.warnings for line in prose(f"warning: {warning}", width)]
    # The group's name wraps in its column (a long model name), so the cost stays on screen.
    columns = (Column(report.by, report.by, "text", rank=0, flex=True), *GROUP_COLUMNS)
    lines += ["", *render(columns, aggregate_rows(report), width=width, wide=wide, title=f"cost by {report.by}")]
    say(lines)


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
    by: str = typer.Option("model", "--by", metavar=choices(GROUP_BY), help="Group an aggregate by this."),
    include_replays: bool = typer.Option(
        False,
        "--include-replays",
        help="Aggregate: also count replays, re-executions and forks' shared prefixes (no spend of their own).",
    ),
    reprice: bool = typer.Option(
        False, "--reprice", help="Price imported runs with Escrow's price table instead of their source's own dollars."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    as_csv: bool = typer.Option(False, "--csv", help="Print CSV (per turn, or per group)."),
    wide: bool = typer.Option(False, "--wide", help="Show every column (tables stacked to fit the width)."),
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
    from orchestrator.composition.launch.reports import report_run, report_runs

    store, prices = load_context(db, config)
    with store:
        if run is not None:
            single = report_run(store, run, prices, reprice)
            tokens = store.run_tokens(single.run_id)
            summary = {"clean": tokens.clean, "calls": len(tokens.calls), "summary": tokens.summary(),
                       **{k.value.lower(): tokens.count(k) for k in TokenClass}}
            from cli.score_cmd import teacher_line, teacher_summaries

            teachers = teacher_summaries(store, single.run_id, prices)
            emit(single, {**run_json(single), "tokens": summary, "teacher": teachers}, line_rows(single), as_json,
                 as_csv, wide, tokens=tokens.summary() if tokens.calls else None,
                 teacher=tuple(teacher_line(t) for t in teachers))
            if html:
                write_html(html, run_html(single))
            return
        many = report_runs(store, by=by, since=since_ts, until=until_ts, prices=prices, include_replays=include_replays,
                           reprice=reprice)
    if not many.groups:
        window = f" started in the window asked ({since or 'the start'} to {until or 'now'})" if since or until else ""
        raise NothingToReport(f"no runs with recorded model calls{window} in {store.url}")
    emit(many, aggregate_json(many), aggregate_rows(many), as_json, as_csv, wide)
    if html:
        write_html(html, aggregate_html(many))


def emit(
    report: RunCost | AggregateReport, as_dict: dict[str, Any], rows: list[dict[str, Any]], as_json: bool,
    as_csv: bool, wide: bool = False, tokens: str | None = None, teacher: tuple[str, ...] = (),
) -> None:
    if as_json:
        emit_json(as_dict)
    elif as_csv:
        typer.echo(to_csv(rows), nl=False)
    elif isinstance(report, RunCost):
        print_run(report, wide=wide, tokens=tokens, teacher=teacher)
    else:
        print_aggregate(report, wide=wide)


def register(app: typer.Typer) -> None:
    app.command("report")(report)

