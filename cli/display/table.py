"""The one table renderer for the terminal, and the one way figures are
written in it. Every table a command prints (``report RUN``, ``report --by``,
``runs``, ``batch``) goes through ``render``.

Designed for 80 columns: no line is wider than the width it is given and no
cell is cut. When every column does not fit, it picks columns by rank (within
a rank, by ``priority``) and names the ones left out; a table has one layout,
a row a record, whatever its content (a table of few groups is not turned on
its side); ``wide`` shows every column, stacking them into
successive tables that each repeat the key columns. One text column may be
``flex``: it takes the width left and wraps onto continuation lines, a
word too long for it (a path) broken across them, after a ``/`` (else a
``-``) where one fits. A flex column of a listing may cap its lines
(``max_lines``: the task in ``runs``, whose whole text ``show`` prints):
its last line then ends with ``…``, the one mark of a cut cell, and
``wide`` lifts the cap.

Plain strings, no rich: ``escrow runs`` must start without it. Dataclasses,
not pydantic, for the same reason.
"""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from orchestrator.costing import money
from orchestrator.terminal_text import printable

ABSENT = "-"  # a figure the record does not have: never written as 0
GAP = "  "
FLEX_MIN = 16  # the narrowest a flex column is squeezed to before columns are dropped
FLEX_SHARE = 3  # ... and it keeps a third of the width, when its text is that long

Kind = Literal["text", "int", "usd", "ratio", "seconds"]


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    kind: Kind = "int"
    rank: int = 1
    """0: a key column, always shown (and repeated in each stacked table);
    higher ranks are left out first when the width runs out."""
    flex: bool = False
    priority: int = 0
    """Within a rank, a column of higher priority is picked first (a cost
    table's ``$`` before its token counts), though shown in its place."""
    max_lines: int | None = None
    """For a flex column: at most this many lines per row, the cut marked ``…``."""


CUT = "…"


def figure(value: Any, kind: Kind = "int") -> str:
    """The one number format: integers with thousands separators, dollars to
    four places (``<0.0001`` rather than a false 0), ratios as percentages,
    seconds to two places; an absent value is ``ABSENT``."""
    if value is None:
        return ABSENT
    if kind == "text" or isinstance(value, str):
        return printable(str(value), newlines=False)
    if kind == "usd":
        return money.amount(value)
    if kind == "ratio":
        return f"{value * 100:.0f}%"
    if kind == "seconds":
        return f"{value:,.2f}"
    return f"{value:,.0f}" if isinstance(value, float) else f"{value:,}"


def terminal_width() -> int:
    """The terminal's columns; in a pipe, ``COLUMNS`` or 80."""
    return shutil.get_terminal_size((80, 24)).columns


def wrapped(text: str, width: int, indent: str = "") -> list[str]:
    """Prose (a note, a warning) folded to ``width`` at word boundaries, no word cut."""
    return textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False) or [""]


def prose(text: str, width: int) -> list[str]:
    """A sentence of a report: controls escaped, folded at words to the width."""
    return wrapped(printable(text, newlines=False), width, indent="  ")


def render(columns: Sequence[Column], rows: Sequence[Mapping[str, Any]], *, width: int | None = None,
           wide: bool = False, title: str | None = None) -> list[str]:
    """The table's lines, each at most ``width`` characters."""
    width = width or terminal_width()
    if wide:
        columns = [replace(c, max_lines=None) for c in columns]
    cells = [[figure(row.get(c.key), c.kind) for c in columns] for row in rows]
    natural = [max([len(c.header), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    out = [title] if title else []
    everything = list(range(len(columns)))
    if _span(columns, natural, everything, max(FLEX_MIN, width // FLEX_SHARE)) <= width:
        return out + _table(columns, cells, natural, everything, width)
    if wide:
        for n, part in enumerate(_stacks(columns, natural, width)):
            out += ([""] if n else []) + _table(columns, cells, natural, part, width)
        return out
    chosen = _picked(columns, natural, width)
    out += _table(columns, cells, natural, chosen, width)
    left_out = [columns[i].header for i in everything if i not in chosen]
    if left_out:
        out += wrapped(f"not shown: {', '.join(left_out)} (--wide shows every column)", width)
    return out


def _shown_width(column: Column, natural: int, keep: int) -> int:
    """What a column needs: its widest cell; a flex one, what it keeps (``keep``)."""
    return min(natural, max(keep, len(column.header))) if column.flex else natural


def _span(columns: Sequence[Column], natural: Sequence[int], chosen: Sequence[int], keep: int = FLEX_MIN) -> int:
    return sum(_shown_width(columns[i], natural[i], keep) for i in chosen) + len(GAP) * (len(chosen) - 1)


def _picked(columns: Sequence[Column], natural: Sequence[int], width: int) -> list[int]:
    """The key columns, then the others by rank (then priority, then order) while they fit.
    Rank 1 may squeeze a flex column to ``FLEX_MIN``; a lower rank joins only
    if the flex column keeps a ``FLEX_SHARE`` of the width."""
    chosen = [i for i, c in enumerate(columns) if c.rank == 0]
    others = (i for i, c in enumerate(columns) if c.rank)
    for i in sorted(others, key=lambda i: (columns[i].rank, -columns[i].priority, i)):
        keep = FLEX_MIN if columns[i].rank == 1 else max(FLEX_MIN, width // FLEX_SHARE)
        if _span(columns, natural, sorted([*chosen, i]), keep) <= width:
            chosen.append(i)
    return sorted(chosen)


def _stacks(columns: Sequence[Column], natural: Sequence[int], width: int) -> list[list[int]]:
    """Every column, in order, in tables that each fit and repeat the keys;
    a flex column keeps a ``FLEX_SHARE`` of the width (a group's name wraps
    in it, not a few letters a line)."""
    keys = [i for i, c in enumerate(columns) if c.rank == 0]
    keep = max(FLEX_MIN, width // FLEX_SHARE)
    parts: list[list[int]] = []
    current: list[int] = []
    for i in (i for i, c in enumerate(columns) if c.rank):
        if current and _span(columns, natural, sorted([*keys, *current, i]), keep) > width:
            parts.append(sorted([*keys, *current]))
            current = []
        current.append(i)
    parts.append(sorted([*keys, *current]))
    return parts


def _table(columns: Sequence[Column], cells: Sequence[Sequence[str]], natural: Sequence[int],
           chosen: Sequence[int], width: int) -> list[str]:
    widths = {i: natural[i] for i in chosen}
    flex = next((i for i in chosen if columns[i].flex), None)
    if flex is not None:
        others = sum(w for i, w in widths.items() if i != flex) + len(GAP) * (len(chosen) - 1)
        widths[flex] = max(min(natural[flex], width - others), len(columns[flex].header), 1)
    lines = [_line(columns, chosen, widths, {i: columns[i].header for i in chosen})]
    for row in cells:
        pieces = {i: _flowed(row[i], widths[i], columns[i].max_lines) if i == flex else [row[i]] for i in chosen}
        for depth in range(max(len(p) for p in pieces.values())):
            lines.append(_line(columns, chosen, widths, {i: p[depth] if depth < len(p) else "" for i, p in
                                                         pieces.items()}))
    return lines


def _flowed(text: str, width: int, max_lines: int | None) -> list[str]:
    """A flex cell's lines: folded at words, a word wider than the column
    (a path, a model's name) broken after its last ``/`` (else ``-``) that fits, else at the width, so
    no line passes it; past ``max_lines`` cut with ``CUT``."""
    lines: list[str] = []
    for line in textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) or [""]:
        while len(line) > width:  # one word alone on its line: textwrap kept it whole
            cut = next((at for at in (line.rfind(mark, 0, width) + 1 for mark in "/-") if at > width // 2), width)
            lines.append(line[:cut])
            line = line[cut:]
        lines.append(line)
    if max_lines is None or len(lines) <= max_lines:
        return lines
    last = lines[max_lines - 1]
    return [*lines[:max_lines - 1], (last if len(last) < width else last[:width - 1].rstrip()) + CUT]


def _line(columns: Sequence[Column], chosen: Sequence[int], widths: Mapping[int, int],
          texts: Mapping[int, str]) -> str:
    parts = [texts[i].ljust(widths[i]) if columns[i].kind == "text" else texts[i].rjust(widths[i]) for i in chosen]
    return GAP.join(parts).rstrip()

