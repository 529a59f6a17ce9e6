"""``escrow batch``: many tasks from a task file, each one recorded run, on a
local worker pool; ``escrow batch status|report BATCH`` shows where a batch stands."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand

from cli import run_options as ro
from cli.display.batch_html import batch_html
from cli.display.table import ABSENT, Column, figure, prose, render, terminal_width
from cli.logging_setup import configure_logging
from cli.store_options import CONFIG_HELP, DB_HELP, emit_json
from cli.usage import choices
from orchestrator.adapters.model_client.reach import require_model, require_reachable
from orchestrator.composition.batch.driver import BatchPlan, find_batch, pending_tasks, run_batch, start_batch
from orchestrator.composition.batch.errors import TaskFileError
from orchestrator.composition.batch.live_counts import BatchProgress
from orchestrator.composition.batch.pool import PoolOptions
from orchestrator.composition.batch.ray_executor import require_shared_store, run_batch_on_ray
from orchestrator.composition.batch.report import BatchReport, batch_report
from orchestrator.composition.batch.runner import INFRASTRUCTURE_FAILURE, AttemptResult, Deadlines, task_settings
from orchestrator.composition.batch.tasks import load_task_file
from orchestrator.composition.launch.compose import require_token_exact
from orchestrator.costing.money import dollars
from orchestrator.errors import ConfigError
from orchestrator.exit_codes import ExitCode
from orchestrator.settings import Settings, load_settings
from orchestrator.terminal_text import one_line
from store import Store
from store.read.liveness import crashed_runs
from store.write import batches as bstore
from store.write.batches import INFRASTRUCTURE, INTERRUPTED

VIEWS = ("status", "report")
LISTED = 50  # batches `escrow batch list` shows, newest first
EXECUTORS = ("local", "ray")


VIEW_USAGE = {
    "status": ("escrow batch status BATCH [--json] [--wide] [--db URL] [--config FILE]",
               "Where the batch BATCH (an id or a unique prefix) stands: each task's last attempt, its outcome and "
               "run, and the counts. Exit 0."),
    "report": ("escrow batch report BATCH [--json] [--html FILE] [--wide] [--db URL] [--config FILE]",
               "The batch's pass rate, cost, tokens and failures, per task; --html also writes it as one page. "
               "Exit 0."),
    "list": ("escrow batch list [--json] [--db URL] [--config FILE]",
             f"The batches, newest first (the last {LISTED}): id, start, tasks, done and passed."),
}


class BatchCommand(TyperCommand):
    """``batch status --help`` (and ``report``, ``list``) gives that view's own
    help; the first argument is otherwise a task file, so click cannot route it."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] in VIEW_USAGE and "--help" in args[1:]:
            usage, what = VIEW_USAGE[args[0]]
            formatter = ctx.make_formatter()
            formatter.write_usage(usage.split(" ", 1)[0], usage.split(" ", 1)[1], prefix="Usage: ")
            formatter.write_paragraph()
            with formatter.indentation():
                formatter.write_text(what)
            formatter.write_paragraph()
            with formatter.indentation():
                formatter.write_text(f"The options are those of `escrow batch --help`; --db: {DB_HELP}")
            typer.echo(formatter.getvalue(), nl=False)
            ctx.exit(0)
        return super().parse_args(ctx, args)


def register(app: typer.Typer) -> None:
    app.command("batch", cls=BatchCommand)(batch)


def batch(
    target: str = typer.Argument(
        None, help="A task file (JSONL or Parquet), 'status'/'report' followed by a batch id, or 'list'."),
    batch_ref: str = typer.Argument(None, metavar="BATCH",
                                    help="The batch id (or a unique prefix) for status and report."),
    resume: str = typer.Option(None, "--resume", help="Rerun the tasks of BATCH that have no model verdict yet."),
    workers: int = typer.Option(4, "--workers", min=1, max=256, help="Runs at once, each in its own sandbox."),
    start_slots: int = typer.Option(2, "--start-slots", min=1, help="Sandboxes starting at once."),
    replica_slots: int = typer.Option(None, "--replica-slots", min=0, help="Model calls in flight per replica "
                                      "(default: the engine's slots when it says; 0: no limit)."),
    infra_retries: int = typer.Option(2, "--infra-retries", min=0, help="Retries of an infrastructure failure."),
    task_timeout: float = typer.Option(1800.0, "--task-timeout", min=1, help="Seconds for a whole task."),
    start_timeout: float = typer.Option(300.0, "--start-timeout", min=1,
                                        help="Seconds for a sandbox to start (then an infrastructure failure)."),
    lease: float = typer.Option(30.0, "--lease", min=1, help="Seconds after which a silent run reads as crashed."),
    executor: str = typer.Option(None, "--executor", metavar=choices(EXECUTORS),
                                 help="local (a worker pool here; the default) or ray "
                                 "(--address). --resume runs where the batch was started."),
    address: str = typer.Option(None, "--address", help="The Ray cluster, HOST:PORT (with --executor ray)."),
    model_url: list[str] = typer.Option(None, "--model-url", help="Model server base URL; repeat for replicas. "
                                        "{task_id} in it is replaced by the task's id."),
    model: str = ro.MODEL,
    max_turns: int = ro.MAX_TURNS,
    max_tokens: int = ro.MAX_TOKENS,
    context_window: int = ro.CONTEXT_WINDOW,
    tool_protocol: str = ro.TOOL_PROTOCOL,
    system_role: str = ro.SYSTEM_ROLE,
    constrain: str = ro.CONSTRAIN,
    tokenizer: str = ro.TOKENIZER,
    stream: bool = ro.STREAM,
    runtime: str = ro.RUNTIME,
    token_exact: bool = ro.TOKEN_EXACT,
    verify_early: bool = typer.Option(
        None, "--verify-early/--no-verify-early",
        help="Start each run's verifier container while its agent works (off by default in a batch: these "
        "starts do not wait for --start-slots)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    html: Path = typer.Option(None, "--html", help="Also write the report as one self-contained HTML file."),
    wide: bool = typer.Option(False, "--wide", help="Show every column (tables stacked to fit the width)."),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    config: Path = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Run every task of a task file, or show a batch.

    \b
    escrow batch TASKS.jsonl --workers 4   start a batch
    escrow batch TASKS.jsonl --executor ray --address HOST:PORT --db PG_URL
    escrow batch --resume BATCH            rerun tasks without a model verdict,
                                           with the run flags it started with
    escrow batch status BATCH [--json]     where it stands
    escrow batch report BATCH [--json]     pass rate, cost, tokens, failures
    escrow batch report BATCH --html FILE  the same as one HTML page
    escrow batch list [--json]             the batches, newest first

    Exit code: 0 when every task ended with a model verdict (passing or
    not), 1 when some did not (infrastructure or task errors: resume them),
    2 for a usage error, 3 when the store went away mid-batch (resume it
    once the store is back)."""
    given = {name: value for name, value in {
        "model_url": model_url[0] if model_url else None, "model": model, "max_turns": max_turns,
        "max_output_tokens": max_tokens, "context_window": context_window, "tool_protocol": tool_protocol,
        "system_role": system_role, "tokenizer": tokenizer, "stream": stream,
        "sandbox_runtime": runtime, "constrain": constrain, "token_exact": token_exact,
        "verify_early": verify_early,
    }.items() if value is not None}
    settings = load_settings(config, db_url=db, **given)
    if target == "list":
        list_batches(settings, as_json, wide=wide)
        return
    if target in VIEWS:
        if not batch_ref:
            raise ConfigError(f"escrow batch {target} needs a batch id")
        show(settings, target, batch_ref, as_json, html, wide=wide)
        return
    if executor is not None and executor not in EXECUTORS:
        raise ConfigError(f"--executor {executor!r} is not one of: {', '.join(EXECUTORS)}")
    if (executor == "ray") != (address is not None):
        raise ConfigError("--address HOST:PORT goes with --executor ray, and only with it")
    if (target is None) == (resume is None):
        raise ConfigError("give a task file or --resume BATCH (not both)")
    options = PoolOptions(workers=workers, start_slots=start_slots, replica_slots=replica_slots,
                          infra_retries=infra_retries,
                          deadlines=Deadlines(task_s=task_timeout, start_s=start_timeout, lease_s=lease))
    err = Console(stderr=True)
    # Each run's notices (its sandbox runtime, again and again) would bury
    # the batch's own lines: a batch shows warnings and errors only.
    configure_logging(json_lines=settings.log_json, level=logging.WARNING)
    task_file = None
    if resume is None:
        # The input first: a task file or policy the user got wrong is named
        # as such, not as the model server being down, and starts no batch.
        task_file = load_task_file(Path(target))
        for message in task_file.errors:
            err.print(f"[yellow]skipped[/] {escape(task_file.path)} {escape(message)}", highlight=False)
        if not task_file.tasks:
            raise TaskFileError(f"{target}: no task to run: all {len(task_file.errors)} rows were skipped "
                                "(above)", path=target)
        from orchestrator.composition.launch.compose import resolve_policy

        for task in task_file.tasks:
            resolve_policy(task_settings(settings, task, settings.model_url))  # a bad one is a usage error
    with Store.open(settings.store_url) as store:
        if resume is not None:
            batch_id = _resolve(store, resume)
            bstore.abandon_started(store, batch_id, verdict=INFRASTRUCTURE_FAILURE,
                                   error="the batch's driver ended before this attempt did; resumed")
            recorded, _ = pending_tasks(store, batch_id)
            if executor is None:  # where the batch was started, as recorded with it
                executor, address = recorded.executor, recorded.address
            # The run settings it started with, under the flags given now.
            settings = load_settings(config, db_url=db, **{**recorded.run_settings, **given})
        if address is not None:
            require_shared_store(store, address)  # before a batch is recorded
        urls = (model_url or [settings.model_url]) if resume is None else recorded.model_urls
        for url in urls:
            require_reachable(url)  # every replica answers before a batch is recorded or resumed
        if settings.model is None and "{" not in urls[0]:
            # Named once, from the server, and recorded with the batch's settings (a resume keeps it).
            given["model"] = require_model(urls[0], None)
            settings = settings.model_copy(update={"model": given["model"]})
        if settings.token_exact:
            require_token_exact(settings, urls)  # a refusal every run would meet, once
        if task_file is not None:
            plan = BatchPlan(tasks_dir=str(Path(target).resolve().parent),
                             model_urls=tuple(model_url or [settings.model_url]), options=options,
                             executor=executor or "local", address=address, run_settings=given)
            batch_id = start_batch(store, task_file, plan)
        err.print(f"batch [bold]{batch_id}[/]" + (f" on Ray at {escape(address)}" if address else ""))
        _, pending = pending_tasks(store, batch_id)
        run = run_batch if address is None else partial(run_batch_on_ray, address=address)
        _run_with_progress(store, settings, batch_id, len(pending), options, err, run)
        report = _report(store, batch_id)
    _render(report, as_json, wide=wide)
    raise typer.Exit(ExitCode.OK if report.done == report.n_tasks else ExitCode.FINDING)


def _run_with_progress(store: Store, settings: Settings, batch_id: str, total: int, options: PoolOptions,
                       err: Console, run: Callable[..., object] = run_batch) -> None:
    progress = BatchProgress(total)
    finished = threading.Event()
    said = threading.Lock()
    width = terminal_width()

    def attempt(result: AttemptResult) -> None:
        # Each task's end as it comes, on a terminal above the status line and
        # in a pipe (CI, nohup) where the status line is never drawn.
        progress.attempt(result)
        what = result.verdict or {INFRASTRUCTURE: "infrastructure failure", INTERRUPTED: "interrupted"}.get(
            result.outcome, "task error")
        text = (f"[{progress.finished}/{total}] {result.task_id} {what}"
                + (f" · run {result.run_id[:12]}" if result.run_id else "")
                + (f" · {one_line(result.error, 400)}" if result.error else ""))
        with said:
            for line in prose(text, width):
                err.print(line, highlight=False, markup=False)

    with err.status(progress.line(min(options.workers, total)), spinner="dots") as status:
        def tick() -> None:
            while not finished.wait(1.0):
                status.update(progress.line(min(options.workers, total - progress.finished)))

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            run(store, settings, batch_id, on_attempt=attempt, options=options,
                on_stopping=lambda: err.print("[yellow]Ctrl-C[/]: canceling the runs in flight, starting no more"))
        finally:
            finished.set()
            ticker.join()
    err.print(progress.line(0))


def _resolve(store: Store, ref: str) -> str:
    return find_batch(store, ref)


def _report(store: Store, batch_id: str) -> BatchReport:
    view = bstore.load_batch(store, batch_id)
    assert view is not None
    run_ids = [a.run_id for a in view.latest().values() if a.run_id]
    summaries = {s.run.id: s for s in store.summaries(run_ids)} if run_ids else {}
    return batch_report(view, summaries, crashed_runs(store))


BATCH_COLUMNS = (
    Column("batch_id", "batch", "text", rank=0), Column("n_tasks", "tasks"), Column("done", "done"),
    Column("passed", "passed"), Column("pass_rate", "pass", "ratio"), Column("suspect", "suspect", rank=1),
    Column("cost_usd", "$", "usd"),
    Column("task_errors", "task errors", rank=2), Column("infra_failures", "infra", rank=2),
    Column("task_file", "task file", "text", flex=True),
)


def list_batches(settings: Settings, as_json: bool, *, wide: bool = False) -> None:
    with Store.open(settings.store_url, readonly=True, create=False) as store:
        ids, total = bstore.list_batches(store, per_page=LISTED)
        reports = [_report(store, batch_id) for batch_id in ids]
    if as_json:
        emit_json([r.model_dump(mode="json", exclude={"tasks"}) for r in reports])
        return
    if not reports:
        typer.echo("no batches")
        return
    rows = [{**r.model_dump(exclude={"tasks"}), "batch_id": r.batch_id[:12]} for r in reports]
    lines = render(BATCH_COLUMNS, rows, width=terminal_width(), wide=wide)
    if total > len(reports):
        lines.append(f"the {len(reports)} newest of {total} batches")
    typer.echo("\n".join(lines))


def show(settings: Settings, what: str, ref: str, as_json: bool, html: Path | None = None, *,
         wide: bool = False) -> None:
    with Store.open(settings.store_url, readonly=True, create=False) as store:
        report = _report(store, _resolve(store, ref))
    if html is not None:
        try:
            html.write_text(batch_html(report), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write the HTML report to {html}: {exc.strerror}", path=str(html)) from exc
    _render(report, as_json, full=what == "report", wide=wide)


TASK_COLUMNS = (
    Column("task_id", "task", "text", rank=0), Column("outcome", "outcome", "text"),
    Column("verdict", "verdict", "text"), Column("seconds", "secs", "seconds"), Column("cost_usd", "$", "usd"),
    Column("run", "run", "text"), Column("attempts", "tries", rank=2), Column("tokens", "tokens", rank=2),
    Column("replica", "replica", "text", rank=3), Column("error", "error", "text", flex=True),
)


def _render(report: BatchReport, as_json: bool, *, full: bool = True, wide: bool = False) -> None:
    if as_json:
        emit_json(report.model_dump(mode="json"))
        return
    width = terminal_width()
    rate = "n/a" if report.pass_rate is None else f"{report.pass_rate:.0%}"
    facts = [f"tasks {report.n_tasks}", f"done {report.done}", f"passed {report.passed} ({rate})",
             *([f"suspect {report.suspect} (not passes)"] if report.suspect else []),
             f"running {report.running}", f"not started {report.not_started}",
             f"infrastructure failures {report.infra_failures} (sandbox start timeouts {report.start_timeouts})",
             f"task errors {report.task_errors}"]
    if report.interrupted:
        facts.append(f"interrupted {report.interrupted}")
    times = [f"{k} {figure(v, 'seconds')}s" for k, v in (("p50", report.p50_s), ("p95", report.p95_s)) if v is not None]
    lines = [*prose(f"batch {report.batch_id}  ({report.task_file})", width), *prose(" · ".join(facts), width),
             *prose(" · ".join([f"cost {dollars(report.cost_usd)}", f"tokens {figure(report.tokens)}", *times]),
                    width)]
    if report.verdicts:
        lines += prose("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(report.verdicts.items())), width)
    if full:
        lines += prose(f"slowest: {', '.join(report.slowest) or ABSENT}", width)
        lines += prose(f"costliest: {', '.join(report.costliest) or ABSENT}", width)
        # A task with no run yet has no cost or tokens: absent, not 0.
        rows = [{**t.model_dump(), "run": t.run_id and t.run_id[:12],
                 **({} if t.run_id else {"cost_usd": None, "tokens": None})} for t in report.tasks]
        lines += ["", *render(TASK_COLUMNS, rows, width=width, wide=wide)]
    typer.echo("\n".join(lines))
