"""What the store commands share: the --db and --config help, and JSON output."""

from __future__ import annotations

import json
from typing import Any

import typer

DB_HELP = (
    "Store URL (SQLAlchemy form) or a SQLite file's path; default ESCROW_DB_URL, else the SQLite file in "
    "ESCROW_HOME."
)
CONFIG_HELP = "Config file (default: ESCROW_HOME/config.toml)."


def emit_json(value: Any) -> None:
    # ASCII only: JSON escapes C0 controls but not C1 ones (U+009B) or bidi
    # overrides, which a terminal would act on.
    typer.echo(json.dumps(value, indent=2, ensure_ascii=True))
