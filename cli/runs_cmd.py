"""``escrow runs``: list recorded runs. Kept apart from the other store
commands so that listing a SQLite store imports neither SQLAlchemy nor the
table models (``store.read.run_list``); any other store, and any case the light
reader does not judge, goes through the full ``Store``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cli.display.table import Column, render, terminal_width, wrapped
from cli.spans import parse_since
from cli.store_options import CONFIG_HELP, DB_HELP, emit_json
from cli.usage import choices
from orchestrator.errors import ConfigError
from orchestrator.settings import load_settings
from store.read.run_list import RunLine, RunQuery, read_run_lines, runs_json, sqlite_file, when

if TYPE_CHECKING:
    from orchestrator.trajectory import RunSummary
    from store import Store

STATUSES = ("running", "crashed", "finished")  # crashed: running, its lease lapsed (store.read.liveness)
IMPORTED = "IMPORTED"  # store.write.importer.IMPORTED_VERDICT, named here so that listing runs loads no SQLAlchemy


def known_verdict(given: str) -> str:
    """``given`` as the recorded verdict it names (any case); a usage error
    for one no run can have, rather than "no runs"."""
    from orchestrator.agent import Verdict

    known = [v.value for v in Verdict] + [IMPORTED]
    if given.upper() not in known:
        raise ConfigError(f"--verdict takes one of {', '.join(known)}, not {given!r}")
    return given.upper()


# An imported run's mode (orchestrator.interop.records.IMPORT_MODE), spelled
# here so that ``escrow runs`` imports no pydantic.
IMPORT_MODE = "import"

RUN_COLUMNS = (
    Column("id", "run", "text", rank=0), Column("started", "started", "text"),
    Column("outcome", "verdict", "text"), Column("mode", "mode", "text"), Column("turns", "turns"),
    Column("cost_usd", "$", "usd"), Column("model", "model", "text", rank=2),
    Column("input_tokens", "in", rank=3), Column("cached_input_tokens", "cached", rank=3),
    Column("output_tokens", "out", rank=3), Column("task", "task", "text", flex=True, max_lines=3),
)


def runs(
    status: str | None = typer.Option(None, "--status", metavar=choices(STATUSES), help="Runs in this state."),
    verdict: str | None = typer.Option(None, "--verdict", help="e.g. PASS, BUDGET_EXHAUSTED, FAULTED."),
    model: str | None = typer.Option(None, "--model", help="Requested model id."),
    since: str | None = typer.Option(
        None, "--since", help="Started within a span (7d, 24h, 30m) or since an ISO date."
    ),
    limit: int = typer.Option(50, "--limit", min=1, max=100_000, help="Most runs to list, newest first."),
    batch: str | None = typer.Option(None, "--batch", help="Only the runs of this batch (an id or unique prefix)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    wide: bool = typer.Option(False, "--wide",
                              help="Show every column (tables stacked to fit the width) and each task whole."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """List recorded runs, newest first, with token and cost totals."""
    now = time.time()
    try:
        since_ts = parse_since(since, now) if since else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if status is not None and status not in STATUSES:
        raise ConfigError(f"--status takes {', '.join(STATUSES[:-1])} or {STATUSES[-1]}, not {status!r}")
    if verdict is not None:
        verdict = known_verdict(verdict)
    url = load_settings(config, db_url=db).store_url
    wanted = RunQuery(status=status, verdict=verdict, model=model, since=since_ts, limit=limit)
    path = sqlite_file(url) if batch is None else None  # a batch's runs go through the full store
    lines = read_run_lines(path, wanted, now=now) if path is not None else None
    if lines is None:
        lines = _listed_by_store(url, wanted, now, batch)
    if as_json:
        emit_json(runs_json(lines))
    else:
        typer.echo("\n".join(runs_table(lines, now=now, wide=wide)))


def started(ts: float, now: float) -> str:
    """Month, day and time within the year; the date alone before that."""
    fmt = "%m-%d %H:%M" if time.localtime(ts).tm_year == time.localtime(now).tm_year else "%Y-%m-%d"
    return time.strftime(fmt, time.localtime(ts))


def one_line(task: str) -> str:
    """A task as a listing shows it: its whitespace, newlines too, one space
    (an imported task is often a whole issue text)."""
    return " ".join(task.split())


def runs_table(lines: list[RunLine], *, now: float, wide: bool = False, width: int | None = None) -> list[str]:
    if not lines:
        return ["no runs"]
    rows = [{
        **line.totals, "id": line.run["id"][:12], "started": started(line.run["created_at"], now),
        # A run still going has no verdict yet: its status stands in that column.
        "outcome": line.run["verdict"] or line.run["status"], "mode": line.run["mode"],
        "model": line.run["request_model"], "task": one_line(line.run["task"]),
    } for line in lines]
    # The mode marks replays, re-executions, forks and imports; when every run
    # listed is a plain run it says nothing and leaves its width to the task.
    marked = any(line.run["mode"] != "run" for line in lines)
    width = width or terminal_width()
    table = render([c for c in RUN_COLUMNS if marked or c.key != "mode"], rows, width=width, wide=wide)
    if any(line.run["mode"] == IMPORT_MODE for line in lines):
        table += wrapped("import: the run's tokens and $ are its source's own figures (run-level ones included; "
                         "escrow report RUN says which)", width, indent="  ")
    return table + [f"{line.run['id'][:12]} crashed: its process is gone; last alive {when(line.run['last_alive_at'])}"
                    for line in lines if line.run.get("last_alive_at") is not None]


def _listed_by_store(url: str, wanted: RunQuery, now: float, batch: str | None = None) -> list[RunLine]:
    from store import Store

    with Store.open(url, create=False, readonly=True) as store:
        if batch is None:
            found = store.runs(status=wanted.status, verdict=wanted.verdict, model=wanted.model,
                               since=wanted.since, until=wanted.until, limit=wanted.limit, now=now)
        else:
            found = _batch_runs(store, batch, wanted)
    return [RunLine.of(summary) for summary in found]


def _batch_runs(store: Store, ref: str, wanted: RunQuery) -> list[RunSummary]:
    """The runs of every attempt of the batch ``ref``, newest first, filtered as ``wanted``."""
    from orchestrator.composition.batch.driver import find_batch
    from orchestrator.composition.batch.errors import BatchNotFound
    from store.write.batches import load_batch

    batch_id = find_batch(store, ref)
    view = load_batch(store, batch_id)
    if view is None:
        raise BatchNotFound(f"no batch matches {ref!r}", batch=ref)
    run_ids = [a.run_id for a in view.attempts if a.run_id]
    found = [s for s in store.summaries(run_ids) if
             (wanted.status is None or s.run.status == wanted.status)
             and (wanted.verdict is None or s.run.verdict == wanted.verdict)
             and (wanted.model is None or s.run.request_model == wanted.model)
             and (wanted.since is None or s.run.created_at >= wanted.since)]
    return sorted(found, key=lambda s: s.run.created_at, reverse=True)[:wanted.limit]


def register(app: typer.Typer) -> None:
    app.command("runs")(runs)
