"""The ``escrow`` command. Each sub-module registers its own commands; this
module only assembles them and turns typed errors into clear messages."""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.text import Text

from orchestrator import __version__
from orchestrator.errors import EscrowError
from orchestrator.terminal_text import printable

app = typer.Typer(
    name="escrow",
    help="Run coding agents against self-hosted models, record every step, replay and price them.",
    no_args_is_help=True,
    # click's help layout: the option column is capped at 30 characters, so
    # descriptions keep at least 44 of 80 columns instead of a squeezed table.
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"escrow {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit.", callback=_version, is_eager=True),
) -> None:
    """Escrow: agent-loop orchestrator with deterministic replay."""


def _register() -> None:
    from cli import (
        batch_cmd, call_cmd, export_cmd, import_cmd, parity_cmd, policy_cmd, price_cmd, replay_cmd, report_cmd,
        run_cmd, sandbox_cmd, store_cmd, view_cmd,
    )

    for module in (run_cmd, call_cmd, store_cmd, sandbox_cmd, policy_cmd, report_cmd, export_cmd, import_cmd, price_cmd,
                   replay_cmd, parity_cmd, view_cmd, batch_cmd):
        module.register(app)


_register()


def main() -> None:
    """Console entry point: a user mistake never ends in a traceback."""
    try:
        app()
    except EscrowError as exc:
        # The message may quote a file, a task or a model's words: text, never markup, controls escaped.
        line = Text("error:", style="bold red").append(f" {printable(exc.message)}", style="")
        Console(stderr=True, soft_wrap=True).print(line, highlight=False)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        Console(stderr=True).print("[yellow]interrupted[/]")
        sys.exit(130)
