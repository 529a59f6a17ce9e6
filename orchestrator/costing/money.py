"""How a dollar figure reads, everywhere Escrow prints one (terminal, HTML,
the viewer, errors): four places, thousands separated, ``<$0.0001`` for a
cost too small for them (never a false ``$0.0000``), and ``-`` when no cost
is known. JSON and CSV carry the number itself. Pure."""

from __future__ import annotations

ABSENT = "-"
PLACES = 4
SMALLEST = 10 ** -PLACES


def amount(value: float | None) -> str:
    """The figure without its sign, for a column headed ``$``: ``1,234.5000``,
    ``<0.0001``, or ``-``."""
    if value is None:
        return ABSENT
    if 0 < abs(value) < SMALLEST / 2:
        return f"<{SMALLEST:.{PLACES}f}"
    return f"{value:,.{PLACES}f}"


def dollars(value: float | None) -> str:
    """``$1.2345``, ``<$0.0001``, ``-$0.5000``, or ``-`` when absent."""
    shown = amount(value)
    if value is None:
        return shown
    if shown.startswith("<"):
        return f"<${shown[1:]}"
    return f"-${shown[1:]}" if shown.startswith("-") else f"${shown}"
