"""``escrow show``, ``escrow verify`` and ``escrow migrate``:
the trajectory store from the command line. Read commands open the store
read-only and never create or modify it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from cli.display.show import print_trajectory
from cli.display.table import prose, terminal_width
from cli.spans import parse_since
from cli.store_options import CONFIG_HELP, DB_HELP, emit_json
from orchestrator.errors import ConfigError
from orchestrator.settings import load_settings
from orchestrator.terminal_text import printable
from store import ChainBroken, Store
from store.check.verify_lines import check_line
from store.read.run_list import when
from store.write.batches import attempt_of_run


def open_store(db: str | None, config: Path | None, *, readonly: bool = True) -> Store:
    settings = load_settings(config, db_url=db)
    return Store.open(settings.store_url, create=not readonly, readonly=readonly)


def show(
    run: str = typer.Argument(..., help="Run id, or a unique prefix of one."),
    full: bool = typer.Option(False, "--full", help="Words, arguments and outputs whole, and each call's details."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole trajectory as JSON."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Show one run turn by turn: the model's words, its tool calls and what they returned."""
    with open_store(db, config) as store:
        trajectory = store.trajectory(run)
        chain = None if as_json else store.verify(trajectory.run.id)
        attempt = None if as_json else attempt_of_run(store, trajectory.run.id)
    if as_json:
        emit_json(trajectory.model_dump(mode="json"))
        return
    # Lines are folded to the terminal's width, or COLUMNS (80) in a pipe; a diff's are printed whole.
    console = Console(width=terminal_width())
    if chain is not None and not chain.ok:
        # What follows may have been altered since it was recorded: said before it, not after.
        for line in prose(f"warning: this run's hash chain does not verify ({chain.problem}); what follows may "
                          f"not be what was recorded (escrow verify {trajectory.run.id[:12]})", console.width):
            console.print(line, style="bold red", highlight=False, markup=False)
    also = (f"  batch:   {attempt.batch_id[:12]}, task {printable(attempt.task_id)}, attempt {attempt.number}",
            ) if attempt else ()
    print_trajectory(console, trajectory, full=full, also=also)


def verify(
    run: str | None = typer.Argument(None, help="Run id or unique prefix; omit with --all."),
    all_runs: bool = typer.Option(False, "--all", help="Verify every run, and look for rows of deleted runs."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Recompute the hash chain of a run (or all runs) and report the first
    broken link, then check every page of the store file. Exits 1 when any
    chain is broken, 4 when the store is damaged."""
    if all_runs == (run is not None):
        raise ConfigError("give a run id or --all (not both)")
    with open_store(db, config) as store:
        checks = store.verify_all() if all_runs else [store.verify(run or "")]
        # The chains cover the tables' rows; this covers every page of the file.
        store.check_pages()
    if as_json:
        emit_json([c.model_dump() for c in checks])
    else:
        for check in checks:
            typer.echo(check_line(check))
    broken = [c for c in checks if not c.ok]
    if broken:
        raise ChainBroken(
            f"{len(broken)} of {len(checks)} chains broken; first: {broken[0].run_id}: {broken[0].problem}"
        )


def migrate(
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Bring an existing store to this Escrow's schema version."""
    settings = load_settings(config, db_url=db)
    with Store.open(settings.store_url, create=False) as store:
        typer.echo(f"{store.url}: schema version {store.schema_version}")


def gc(
    older_than: str = typer.Option(..., "--older-than", help="Delete runs started longer ago than this (30d, 12h)."),
    keep_verdict: list[str] = typer.Option([], "--keep-verdict", help="Keep runs with this verdict (repeatable)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be deleted, and delete nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Delete whole runs older than a span, the blobs no other run uses, and
    the kept batch workspaces no run records. Each deletion of a run is
    recorded in the deletions table."""
    from orchestrator.composition.launch.compose import kept_workspaces
    from sandbox.kept import sweep
    from store.write.retention import collect, recorded_repos

    try:
        before = parse_since(older_than, time.time())
    except ValueError as exc:
        raise ConfigError(str(exc).replace("--since", "--older-than")) from None
    settings = load_settings(config, db_url=db)
    # A missing store is not made: there is nothing to collect (StoreMissing, exit 3).
    with Store.open(settings.store_url, create=False, readonly=False) as store:
        try:
            with store.write() as conn:
                result = collect(conn, before=before, keep_verdicts=keep_verdict)
                repos = recorded_repos(conn)  # what the runs left still start from
                if dry_run:  # the very deletion, counted, then rolled back with its transaction
                    raise _RolledBack((result, repos))
        except _RolledBack as rolled_back:
            result, repos = rolled_back.result
    # After the commit: a workspace goes only once no run can need it.
    freed = sweep(kept_workspaces(settings), repos, before=before, dry_run=dry_run)
    if as_json:
        emit_json({**result.model_dump(mode="json"), "workspaces_deleted": freed.workspaces,
                   "workspace_bytes_freed": freed.bytes, "dry_run": dry_run})
        return
    width = terminal_width()
    verb, free = ("would delete", "would free") if dry_run else ("deleted", "freed")
    lines = prose(f"{verb} {result.runs_deleted} runs ({result.rows_deleted} rows, {result.blobs_deleted} blobs), "
                  f"{free} {result.bytes_freed:,} bytes; kept {result.runs_kept_as_parents} parents of kept runs"
                  + (" (dry run: nothing deleted)" if dry_run else ""), width)
    lines += prose(f"{verb} {freed.workspaces} kept workspaces, {free} {freed.bytes:,} bytes", width)
    if result.runs:  # a real gc names what it deleted as a dry run names what it would
        lines += ["", f"{'run':<12}  {'entered the store':<19}  {'started':<19}  {'mode':<7}  verdict"]
        lines += [f"{r.run_id[:12]}  {when(r.entered_at)}  {when(r.created_at)}  {r.mode:<7}  "
                  f"{printable(r.verdict or '-')}"[:width] for r in result.runs]
    typer.echo("\n".join(lines))


class _RolledBack(Exception):
    """Ends a dry run's transaction (rolled back), carrying what it counted."""

    def __init__(self, result: Any) -> None:
        super().__init__("dry run")
        self.result = result


def register(app: typer.Typer) -> None:
    app.command("show")(show)
    app.command("verify")(verify)
    app.command("migrate")(migrate)
    app.command("gc")(gc)
