"""The per-run totals rows' arithmetic (schema 8, ``store.read.run_totals``):
a row's figures (``Totals``, in ``FIGURES`` order), adding them up, their
canonical form, and the digest that checks a stored row (schema 10). Pure:
the reads (``run_totals``), the writes (``totals_write``), verify
(``totals_check``) and the aggregate reports all use it."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from store.read.ttft_buckets import TTFT_CHECK_MODULUS
from store.schema.tables import RunTotal, table_of

FIGURES = tuple(c.name for c in table_of(RunTotal).columns
                if c.name not in ("id", "run_id", "own", "model", "engine", "digest"))
INT_FIGURES = frozenset(("calls", "prompt_tokens", "cached_tokens", "cached_reported", "output_tokens", "retries",
                         "ttft_check"))
FIGURE_IS_INT = tuple(name in INT_FIGURES for name in FIGURES)
# A row's spend flag and figures as ``digest`` packs them (``in_run``): with a model, then its
# run's tool seconds and count of model rows; without one (the tool seconds row), then that count.
_FIGURES_FORMAT = "<q" + "".join("q" if is_int else "d" for is_int in FIGURE_IS_INT)
ROW_IN_RUN = struct.Struct(_FIGURES_FORMAT + "dq")
MARKER_ROW = struct.Struct(_FIGURES_FORMAT + "q")

Key = tuple[str, int, str | None, str | None]
"""(run id, own, model, engine); model None: the tool seconds row."""


@dataclass
class Totals:
    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cached_reported: int = 0
    output_tokens: int = 0
    direct_s: float = 0.0
    http_s: float = 0.0
    wait_s: float = 0.0
    decode_s: float = 0.0
    retries: int = 0
    ttft_check: int = 0
    tool_s: float = 0.0
    ttft: dict[int, int] = field(default_factory=dict)

    def add(self, other: "Totals") -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.cached_tokens += other.cached_tokens
        self.cached_reported += other.cached_reported
        self.output_tokens += other.output_tokens
        self.direct_s += other.direct_s
        self.http_s += other.http_s
        self.wait_s += other.wait_s
        self.decode_s += other.decode_s
        self.retries += other.retries
        self.ttft_check = (self.ttft_check + other.ttft_check) % TTFT_CHECK_MODULUS
        self.tool_s += other.tool_s
        for bucket, n in other.ttft.items():
            self.ttft[bucket] = self.ttft.get(bucket, 0) + n


def digest(head: str, key: Key, figures: Sequence[Any]) -> str:
    """What a totals row is checked by: the chain head of its run when it was
    computed, its key and its figures, and how its run's rows of the same
    spend flag stand (``in_run``). A report recomputes it from what it read
    and the run's current head, so a row altered in place, added, deleted or
    computed before the run's chain moved on (stale) is named, not summed.
    Like the chain, it holds against edits that do not recompute it;
    ``escrow verify`` recomputes the totals from the rows themselves.

    The figures are packed in their column's type, which is both exact and
    fast: a fleet report checks tens of thousands of rows. A value that does
    not pack (a float in an integer column, a NULL) gives "", which matches no
    stored digest."""
    run_id, own, model, engine = key
    return digester(model, engine)(head, run_id, own, figures)


def digester(model: str | None, engine: str | None) -> Callable[[str, str, int, Sequence[Any]], str]:
    """``digest`` for the rows of one model and engine, what they share
    encoded once: a report checks each of its rows with one of these."""
    tail = f"\x1f{chr(0) if model is None else model}\x1f{chr(0) if engine is None else engine}".encode(
        "utf-8", "surrogatepass")
    pack, sha256 = (ROW_IN_RUN if model is not None else MARKER_ROW).pack, hashlib.sha256

    def of(head: str, run_id: str, own: int, figures: Sequence[Any]) -> str:
        try:
            packed = pack(own, *figures)
        except struct.error:
            return ""
        return sha256(f"{head}\x1f{run_id}".encode("utf-8", "surrogatepass") + tail + packed).hexdigest()

    return of


def in_run(figures: Sequence[Any], model: str | None, tool_s: Any, model_rows: int) -> tuple[Any, ...]:
    """What a row's digest is over besides its key: its figures, then, for a
    row with a model, its run's tool seconds under the same spend flag (the
    model-less row's, so that one is checked with every row a report reads)
    and, for any row, how many rows with a model the run has under that flag
    (so a row deleted is named as well)."""
    return (*figures, tool_s, model_rows) if model is not None else (*figures, model_rows)


def canonical(figures: Sequence[Any]) -> tuple[Any, ...]:
    """The figures as their columns hold them: int or float."""
    return tuple(int(v) if is_int else float(v) for v, is_int in zip(figures, FIGURE_IS_INT, strict=True))


def from_row(row: Mapping[Any, Any]) -> tuple[Key, Totals]:
    # By name: the bench's released readers pass the figures of their schema, fewer than ``Totals`` holds.
    return (row["run_id"], row["own"], row["model"], row["engine"]), Totals(**{name: row[name] for name in FIGURES})


def order(key: Key) -> tuple[str, int, bool, str, str]:
    run_id, own, model, engine = key
    return run_id, own, model is not None, model or "", engine or ""
