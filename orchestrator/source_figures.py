"""An imported run's run-level figures as its import event records them:
the names, and reading them back. Standard library alone, so that the light
runs listing (``store.read.run_list``) reads them without importing the parsers."""

from __future__ import annotations

import json
from typing import Any

IMPORT_EVENT = "import"  # the imported run's event of provenance and the source's run-level data
RUN_LEVEL = "run_level"  # its key for the source's run-level totals ("reported", "counted")


def counted_run_level(data_json: str) -> dict[str, Any] | None:
    """From an import event's data, the source's run-level figures that
    count in the run's totals (``run_level.counted``), or None."""
    try:
        data = json.loads(data_json)
    except ValueError:
        return None
    level = data.get(RUN_LEVEL) if isinstance(data, dict) else None
    counted = level.get("counted") if isinstance(level, dict) else None
    return counted if isinstance(counted, dict) else None


def add_run_level(totals: dict[str, Any], counted: dict[str, Any]) -> None:
    """A run's listed totals (``RunTotals`` fields) with its counted run-level
    figures added: a figure no call reported (absent) is then the source's."""
    for name, key in (("prompt_tokens", "input_tokens"), ("cached_tokens", "cached_input_tokens"),
                      ("completion_tokens", "output_tokens")):
        if counted.get(name) is not None:
            totals[key] = (totals.get(key) or 0) + counted[name]
            if isinstance(totals.get("unreported"), dict):
                totals["unreported"].pop(key, None)
    if counted.get("cost_usd") is not None:
        totals["cost_usd"] = (totals.get("cost_usd") or 0.0) + counted["cost_usd"]
