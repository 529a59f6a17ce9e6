"""``escrow policy check|show``: validate a policy file and say what it grants."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cli.display.table import prose, terminal_width

policy_app = typer.Typer(help="Validate and explain capability policies.", no_args_is_help=True, rich_markup_mode=None)


@policy_app.command("check")
def check(
    file: Path = typer.Argument(..., help="Policy TOML file to validate."),
    as_json: bool = typer.Option(False, "--json", help="Print the validated policy as JSON."),
) -> None:
    """Validate FILE and explain what it grants (exit 65 when invalid)."""
    from policies import explain, load_policy

    policy = load_policy(file)
    if as_json:
        typer.echo(json.dumps({"valid": True, "policy": policy.model_dump(mode="json"), "grants": explain(policy)},
                              sort_keys=True))
    else:
        width = terminal_width()
        typer.echo("\n".join([*prose(f"{file}: valid", width),
                              *("  " + part for line in explain(policy) for part in prose(line, width - 2))]))


@policy_app.command("show-default")
def show_default(as_json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """Print the policy that applies when none is given."""
    from policies import default_policy, explain

    policy = default_policy()
    if as_json:
        typer.echo(json.dumps(policy.model_dump(mode="json"), sort_keys=True))
    else:
        width = terminal_width()
        typer.echo("\n".join(part for line in explain(policy) for part in prose(line, width)))


def register(app: typer.Typer) -> None:
    app.add_typer(policy_app, name="policy")
