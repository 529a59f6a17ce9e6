"""``escrow price``: show the price table and edit its local overrides.

The shipped table (policies/prices.toml) is never edited; ``set`` and
``unset`` change ESCROW_HOME/prices.toml, which is layered over it."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from cli.display.table import prose, terminal_width
from cli.store_options import emit_json
from orchestrator.settings import load_settings
from policies.price_table import PRICE_FIELDS, PriceTable, load_price_table, local_price_path, set_price, unset_price

price_app = typer.Typer(
    help="Show the price table and edit local price overrides.", no_args_is_help=True, rich_markup_mode=None
)

CONFIG_HELP = "Config file (default: ESCROW_HOME/config.toml)."


def home_of(config: Path | None) -> Path:
    return load_settings(config).home


def table_json(table: PriceTable) -> dict[str, object]:
    return {
        "version": table.version,
        "sources": list(table.sources),
        "overridden": list(table.overridden),
        "models": {m: p.model_dump(exclude={"model"}) for m, p in sorted(table.prices.items())},
        "unknown_models": "priced at $0 with a warning",
    }


def print_table(table: PriceTable) -> None:
    out = Console(highlight=False)
    out.print(f"price table {table.version}")
    for source in table.sources:
        out.print(f"  from {source}")
    view = Table(title="$ per million tokens; GPU $ per hour", title_justify="left")
    for header in ("model", "input", "cached input", "output", "GPU $/h", "source"):
        view.add_column(header, justify="left" if header in ("model", "source") else "right")
    for model, p in sorted(table.prices.items()):
        view.add_row(
            model, f"{p.input_per_mtok:g}", f"{p.cached_rate:g}", f"{p.output_per_mtok:g}", f"{p.gpu_per_hour:g}",
            "local" if model in table.overridden else "shipped",
        )
    out.print(view)
    out.print("A model not listed costs $0 and reports say so.")


@price_app.command("show")
def show(
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Show the effective price table: shipped defaults with local overrides."""
    table = load_price_table(home_of(config))
    if as_json:
        emit_json(table_json(table))
    else:
        print_table(table)


@price_app.command("set")
def set_(
    model: str = typer.Argument(..., help="Model id as requested (e.g. gemma-3-270m)."),
    input_: float | None = typer.Option(None, "--input", help="$ per million input (prompt) tokens."),
    cached_input: float | None = typer.Option(
        None, "--cached-input", help="$ per million cached prompt tokens (default: the input price)."
    ),
    output: float | None = typer.Option(None, "--output", help="$ per million output tokens."),
    gpu_hour: float | None = typer.Option(
        None, "--gpu-hour", help="GPU $ per hour, charged on each call's measured seconds."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the model's effective price as JSON."),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Set some of MODEL's prices in the local overrides (other fields keep their value)."""
    home = home_of(config)
    figures = dict(zip(PRICE_FIELDS, (input_, cached_input, output, gpu_hour), strict=True))
    path = set_price(home, model, figures)
    price = load_price_table(home).prices[model]
    if as_json:
        emit_json({"model": model, "file": str(path), **price.model_dump(exclude={"model"})})
    else:
        typer.echo("\n".join(prose(
            f"{model}: input {price.input_per_mtok:g}, cached input {price.cached_rate:g}, output "
            f"{price.output_per_mtok:g} $/Mtok; GPU {price.gpu_per_hour:g} $/h (saved in {path})", terminal_width())))


@price_app.command("unset")
def unset(
    model: str = typer.Argument(..., help="Model id whose local override to drop."),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Drop MODEL's local override; the shipped price (if any) applies again."""
    home = home_of(config)
    if unset_price(home, model):
        typer.echo("\n".join(prose(f"{model}: local override removed from {local_price_path(home)}",
                                   terminal_width())))
    else:
        typer.echo(f"{model}: no local override")


def register(app: typer.Typer) -> None:
    app.add_typer(price_app, name="price")
