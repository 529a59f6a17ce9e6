"""Time spans on the command line: ``--since 7d``, ``--older-than 30d`` or an ISO date."""

from __future__ import annotations

import re
from datetime import datetime, timezone

_SPAN = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(value: str, now: float) -> float:
    """``7d``, ``24h``, ``30m`` ago, or an ISO date/time (UTC unless it says
    otherwise), as Unix seconds. Raises ValueError with a readable message."""
    match = _SPAN.match(value.strip().lower())
    if match:
        return now - float(match.group(1)) * _SECONDS[match.group(2)]
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"--since takes a span like 7d, 24h, 30m or an ISO date, not {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()
