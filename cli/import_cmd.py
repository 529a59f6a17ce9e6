"""``escrow import``: other agents' trajectories (SWE-agent, mini-swe-agent,
OpenHands, Inspect, ATIF) recorded as runs with mode ``import``."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import typer
from rich.console import Console

from cli.display.table import terminal_width
from cli.store_cmd import open_store
from cli.store_options import CONFIG_HELP, DB_HELP
from cli.usage import choices
from orchestrator.errors import ConfigError
from orchestrator.interop import FORMATS, ReadLimits, SourceError
from orchestrator.terminal_text import printable
from store.write.importer import ImportOutcome, import_files

MiB = 1024 * 1024


def import_(
    files: list[Path] = typer.Argument(
        ..., help="Trajectory files (.traj, .json, .eval) or OpenHands V1 conversation folders.", show_default=False
    ),
    fmt: str = typer.Option("auto", "--format", metavar=choices(("auto", *FORMATS)),
                               help="The source format; auto: told by the file."),
    again: bool = typer.Option(False, "--again", help="Import a file again even if its sha256 was imported before."),
    max_mib: int = typer.Option(
        512, "--max-mib", help="Refuse a source file (or an .eval's content) over this many MiB."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per file, one a line (JSON Lines)."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Import trajectories recorded by other agents as runs (mode import),
    one transaction per file, for `escrow report`, `show` and `export`.

    Figures a source lacks are stored as absent, never guessed. A file whose
    sha256 was imported before is skipped unless --again. Exit codes: 0 all
    imported; 12 unreadable (truncated, corrupt, a compression method Escrow
    cannot read); 13 wrong or unknown format; 14 unsupported schema version;
    15 over a size cap (or a zip bomb)."""
    if fmt != "auto" and fmt not in FORMATS:
        raise ConfigError(f"--format takes auto or one of {', '.join(FORMATS)}, not {fmt!r}")
    if max_mib <= 0:
        raise ConfigError("--max-mib must be positive")
    limits = ReadLimits(max_file_bytes=max_mib * MiB, max_member_bytes=max_mib * MiB, max_total_bytes=2 * max_mib * MiB)
    err = Progress(terminal_width())
    failures: list[SourceError] = []
    with open_store(db, config, readonly=False) as store:
        results = import_files(store, files, fmt=fmt, again=again, limits=limits)
        for n, (path, outcome) in enumerate(zip(files, results, strict=True), start=1):
            if isinstance(outcome, SourceError):
                failures.append(outcome)
                if as_json:
                    json_line({"path": str(path), "error": outcome.message, "exit_code": outcome.exit_code})
                else:
                    err.say(f"[{n}/{len(files)}] error: {outcome.message}", style="bold red")
                continue
            report(outcome, n, len(files), as_json, err)
    if failures:
        sys.exit(failures[0].exit_code)


class Progress:
    """A file's line on stderr, folded to the width (a path is folded too,
    never cut), its controls escaped."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)

    def say(self, text: str, style: str = "") -> None:
        for line in textwrap.wrap(printable(text, newlines=False), self.width, subsequent_indent="  ",
                                  break_on_hyphens=False):
            self.console.print(line, style=style, markup=False)


def json_line(value: dict) -> None:
    # One object a line: a stream a program reads line by line (ASCII, as emit_json).
    typer.echo(json.dumps(value, ensure_ascii=True))


def report(outcome: ImportOutcome, n: int, total: int, as_json: bool, err: Progress) -> None:
    name = outcome.path  # as given; a long one folds onto the next lines
    if as_json:
        json_line(outcome.model_dump(mode="json"))
    elif outcome.skipped:
        err.say(f"[{n}/{total}] {name}: already imported as {', '.join(r[:12] for r in outcome.run_ids)}"
                " (--again imports it again)")
    else:
        err.say(f"[{n}/{total}] {name}: {outcome.format} {outcome.version}, {len(outcome.run_ids)} run(s), "
                f"{outcome.calls} call(s)")
        typer.echo("\n".join(outcome.run_ids))


def register(app: typer.Typer) -> None:
    app.command("import")(import_)
