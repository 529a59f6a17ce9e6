"""A recorded JSON value (an event's data, a tool call's arguments) as lines
a person reads: ``key: value``, a nested value or a text of several lines
under its key, two spaces further in. ``--json`` keeps the machine form.

Plain strings; the caller folds them to the screen's width."""

from __future__ import annotations

from typing import Any

from cli.display.table import ABSENT, figure
from orchestrator.terminal_text import printable

INDENT = "  "
VALUE_LINES = 4  # of a text of several lines, unless full


def scalar(key: str, value: Any) -> str:
    """One value on its line: absent as ``-``; dollars, seconds and counts in
    the one number format; other fractions to six significant digits."""
    if value is None:
        return ABSENT
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if key.endswith("usd") or "cost" in key:  # an imported accumulated_cost is dollars too
            return figure(value, "usd")
        if key.endswith("_s"):
            return figure(value, "seconds")
        if abs(value) >= 1e6:  # a timestamp, say: every second kept
            return f"{value:,.2f}"
        if value.is_integer():
            return figure(int(value))
        shown = f"{value:.6g}"
        return f"{value:.12f}".rstrip("0") if "e" in shown else shown  # 0.0000045, not 4.5e-06
    if isinstance(value, int):
        return figure(value)
    return printable(str(value).rstrip("\n"), newlines=False)  # a line's own end is no part of what it says


def data_lines(value: Any, *, full: bool, depth: int = 0) -> list[str]:
    """The lines of a JSON value (a dict at the top); ``full``: every line of
    every text, else a text of many lines collapsed, the count hidden said."""
    lead = INDENT * depth
    if isinstance(value, dict):
        if not value:
            return [f"{lead}(empty)"]
        out: list[str] = []
        for key, item in value.items():
            out += _entry(f"{lead}{printable(str(key), newlines=False)}:", item, full=full, depth=depth)
        return out
    if isinstance(value, list):
        if not value:
            return [f"{lead}(none)"]
        if all(not isinstance(item, (dict, list)) and not _multiline(item) for item in value):
            return [lead + ", ".join(scalar("", item) for item in value)]
        out = []
        for item in value:
            if isinstance(item, dict) and item:  # ``- key: value``, its other keys under the first
                inner = data_lines(item, full=full, depth=depth + 1)
                out += [lead + "- " + inner[0].lstrip(" "), *inner[1:]]
            else:
                out += _entry(f"{lead}-", item, full=full, depth=depth)
        return out
    return [lead + scalar("", value)]


def _multiline(value: Any) -> bool:
    return isinstance(value, str) and "\n" in value.strip("\n")


def _entry(label: str, value: Any, *, full: bool, depth: int) -> list[str]:
    """``label value`` on one line, or the label with the value's lines under it."""
    key = label.strip().rstrip(":")
    if isinstance(value, list) and value and all(not isinstance(i, (dict, list)) and not _multiline(i) for i in value):
        return [f"{label} {', '.join(scalar('', item) for item in value)}"]
    if isinstance(value, (dict, list)) and value:
        return [label, *data_lines(value, full=full, depth=depth + 1)]
    if _multiline(value):
        lines = printable(value.strip("\n")).expandtabs().splitlines()
        lead = INDENT * (depth + 1)
        shown = lines if full or len(lines) <= VALUE_LINES + 1 else lines[:VALUE_LINES]
        out = [label, *(lead + line for line in shown)]
        if len(shown) < len(lines):
            out.append(f"{lead}… {len(lines) - len(shown)} more lines (--full shows them)")
        return out
    if isinstance(value, (dict, list)):
        return [f"{label} {'(empty)' if isinstance(value, dict) else '(none)'}"]
    return [f"{label} {scalar(key, value)}"]
