"""Plain-text renderings of store views for the CLI (``escrow verify``'s
lines); ``escrow show``'s are in ``cli/display/record.py``."""

from __future__ import annotations

from store.chain import ChainCheck


def check_line(check: ChainCheck) -> str:
    if check.ok:
        return f"ok      {check.run_id}  {check.rows} rows  head {check.head[:16]}"
    return f"BROKEN  {check.run_id}  {check.problem}"
