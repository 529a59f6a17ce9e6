"""Placeholder: commands are added by the issue that owns this module."""

import typer


def register(app: typer.Typer) -> None:
    return None
