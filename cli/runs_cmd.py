"""``escrow runs``: list recorded runs. Kept apart from the other store
commands so that listing a SQLite store imports neither SQLAlchemy nor the
table models (``store.run_list``); any other store, and any case the light
reader does not judge, goes through the full ``Store``."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from cli.spans import parse_since
from cli.store_options import CONFIG_HELP, DB_HELP, emit_json
from orchestrator.errors import ConfigError
from orchestrator.settings import load_settings
from store.run_list import RunLine, RunQuery, read_run_lines, runs_json, runs_table, sqlite_file


def runs(
    status: str | None = typer.Option(None, "--status", help="running or finished."),
    verdict: str | None = typer.Option(None, "--verdict", help="e.g. PASS, BUDGET_EXHAUSTED, FAULTED."),
    model: str | None = typer.Option(None, "--model", help="Requested model id."),
    since: str | None = typer.Option(
        None, "--since", help="Started within a span (7d, 24h, 30m) or since an ISO date."
    ),
    limit: int = typer.Option(50, "--limit", min=1, max=100_000, help="Most runs to list, newest first."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """List recorded runs, newest first, with token and cost totals."""
    now = time.time()
    try:
        since_ts = parse_since(since, now) if since else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    url = load_settings(config, db_url=db).store_url
    wanted = RunQuery(status=status, verdict=verdict, model=model, since=since_ts, limit=limit)
    path = sqlite_file(url)
    lines = read_run_lines(path, wanted, now=now) if path is not None else None
    if lines is None:
        lines = _listed_by_store(url, wanted, now)
    if as_json:
        emit_json(runs_json(lines))
    else:
        typer.echo(runs_table(lines))


def _listed_by_store(url: str, wanted: RunQuery, now: float) -> list[RunLine]:
    from store import Store

    with Store.open(url, create=False, readonly=True) as store:
        found = store.runs(status=wanted.status, verdict=wanted.verdict, model=wanted.model, since=wanted.since,
                           until=wanted.until, limit=wanted.limit, now=now)
    return [RunLine.of(summary) for summary in found]


def register(app: typer.Typer) -> None:
    app.command("runs")(runs)
