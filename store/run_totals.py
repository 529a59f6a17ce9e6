"""Per-run totals (schema 8): what an aggregate report sums over a run's
calls, written once when the run is finished, so a fleet report reads a few
rows a run instead of every response, attempt and tool row.

One row per (run, spend flag, model, engine): answered calls, prompt tokens,
cached tokens clamped to each call's prompt, how many calls reported a
cached count (schema 12: a sum of none is absent, not 0), output tokens,
the seconds of calls recorded without attempts (their whole duration), the attempts' HTTP
and backoff seconds, decode seconds, retries; and in ``run_ttfts``, per
TTFT bucket, how many of its calls had their TTFT in it. The spend flag
``own`` is 0 for a fork's shared prefix (turns before ``forked_at_turn``,
its parent's spend) and 1 otherwise. A row with no model
holds the tool seconds of its spend flag; every run with totals has the
``own = 1`` one, so "has totals" is one indexed look-up.

Totals are derived data, never chained: ``compute`` is the one definition
(the report's raw path, the writer, the migration's backfill and ``escrow
verify``'s recomputation all call it), so a report reads the same figures
either way, and ``totals_check.problems`` names a run whose stored totals
differ from its rows. A run with a cell that is not a number gets no totals:
the report then reads its rows and stops on the damaged cell, as before.
``totals_write`` writes them, ``ttft_buckets`` is the histograms'
arithmetic, and ``store.migrations`` adds and backfills them.
"""

from __future__ import annotations

import hashlib
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Integer, Table, case, cast, exists, func, or_, select

from store.cells import check_row, not_a_number
from store.tables import CallAttempt, ModelResponse, Run, RunTotal, RunTtft, ToolExecution, table_of
from store.ttft_buckets import TTFT_CHECK_MODULUS, ttft_bucket, ttft_check

TOTALS: Table = table_of(RunTotal)
TTFTS: Table = table_of(RunTtft)
DERIVED: tuple[Table, ...] = (TOTALS, TTFTS)
RUNS: Table = table_of(Run)
RESPONSES: Table = table_of(ModelResponse)
ATTEMPTS: Table = table_of(CallAttempt)
TOOLS: Table = table_of(ToolExecution)
MODEL = "gen_ai.request.model"
SUMMED = ("gen_ai.usage.input_tokens", "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.output_tokens",
          "total_s", "decode_s", "ttft_s", "n_attempts")
ATTEMPT_SUMMED = ("duration_s", "backoff_s")
TOOL_SUMMED = ("duration_s",)
NUMBERS = tuple(c.name for c in TOTALS.columns if c.name not in ("run_id", "model", "engine", "digest"))
FIGURES = tuple(c.name for c in TOTALS.columns if c.name not in ("id", "run_id", "own", "model", "engine", "digest"))
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


def own_flag(rows: Table) -> Any:
    return case((or_(RUNS.c.forked_at_turn.is_(None), rows.c.turn >= RUNS.c.forked_at_turn), 1), else_=0)


def _damage(table: Table, columns: tuple[str, ...], dialect: str) -> Any:
    """1 when a summed cell is not a number (SQLite would sum it as 0)."""
    if dialect != "sqlite":
        return func.max(0)
    return func.max(case((not_a_number(table, columns), 1), else_=0))


def queries(runs: Any, dialect: str) -> dict[str, Any]:
    """The sums over the rows of the runs ``runs`` (a condition on ``runs``)
    selects, per (run, own, model, engine)."""
    own, model, engine = own_flag(RESPONSES), RESPONSES.c[MODEL], RESPONSES.c.engine
    prompt, cached = RESPONSES.c["gen_ai.usage.input_tokens"], RESPONSES.c["gen_ai.usage.cache_read.input_tokens"]
    # A call whose server sent no cached count records 0 with source "absent" (as ``escrow runs`` reads it).
    reported = func.sum(case((RESPONSES.c.cached_input_tokens_source == "absent", 0), else_=1))
    with_responses = RUNS.join(RESPONSES, RESPONSES.c.run_id == RUNS.c.id)
    a_own, t_own = own_flag(ATTEMPTS), own_flag(TOOLS)
    millis = cast(func.round(RESPONSES.c.ttft_s * 1000), Integer)
    return {
        "answered": select(
            RUNS.c.id, own, model, engine, func.count(), func.sum(prompt),
            func.sum(case((cached > prompt, prompt), else_=cached)), reported,
            func.sum(RESPONSES.c["gen_ai.usage.output_tokens"]),
            # A call recorded without attempts counts its whole duration as GPU time.
            func.sum(case((RESPONSES.c.n_attempts == 0, RESPONSES.c.total_s), else_=0.0)),
            func.sum(RESPONSES.c.decode_s), func.sum(RESPONSES.c.n_attempts - 1), _damage(RESPONSES, SUMMED, dialect),
        ).select_from(with_responses).where(runs).group_by(RUNS.c.id, own, model, engine),
        # An attempt counts for the engine that answered its call (none: an unanswered call).
        "attempts": select(
            RUNS.c.id, a_own, ATTEMPTS.c[MODEL], engine, func.sum(ATTEMPTS.c.duration_s),
            func.sum(ATTEMPTS.c.backoff_s), _damage(ATTEMPTS, ATTEMPT_SUMMED, dialect),
        ).select_from(RUNS.join(ATTEMPTS, ATTEMPTS.c.run_id == RUNS.c.id)
                      .outerjoin(RESPONSES, RESPONSES.c.call_id == ATTEMPTS.c.call_id))
        .where(runs).group_by(RUNS.c.id, a_own, ATTEMPTS.c[MODEL], engine),
        "tools": select(RUNS.c.id, t_own, func.sum(TOOLS.c.duration_s), _damage(TOOLS, TOOL_SUMMED, dialect))
        .select_from(RUNS.join(TOOLS, TOOLS.c.run_id == RUNS.c.id)).where(runs).group_by(RUNS.c.id, t_own),
        "ttft": select(RUNS.c.id, own, model, engine, millis, func.count())
        .select_from(with_responses).where(runs, RESPONSES.c.ttft_s.is_not(None))
        .group_by(RUNS.c.id, own, model, engine, millis),
    }


def compute(conn: Connection, runs: Any) -> tuple[dict[Key, Totals], set[str]]:
    """The totals of the runs ``runs`` selects, from their rows, and the runs
    with a summed cell that is not a number."""
    sql = queries(runs, conn.dialect.name)
    ids = conn.execute(select(RUNS.c.id).where(runs)).scalars()
    out: dict[Key, Totals] = {(run_id, 1, None, None): Totals() for run_id in ids}
    damaged: set[str] = set()
    for run_id, own, model, engine, n, p, c, reported, o, direct, dec, retries, bad in conn.execute(sql["answered"]):
        out[(run_id, own, model, engine)] = Totals(
            calls=n, prompt_tokens=p or 0, cached_tokens=c or 0, cached_reported=reported or 0, output_tokens=o or 0,
            direct_s=direct or 0.0, decode_s=dec or 0.0, retries=retries or 0)
        if bad:
            damaged.add(run_id)
    for run_id, own, model, engine, http, wait, bad in conn.execute(sql["attempts"]):
        slot = out.setdefault((run_id, own, model, engine), Totals())
        slot.http_s, slot.wait_s = http or 0.0, wait or 0.0
        if bad:
            damaged.add(run_id)
    for run_id, own, seconds, bad in conn.execute(sql["tools"]):
        out.setdefault((run_id, own, None, None), Totals()).tool_s = seconds or 0.0
        if bad:
            damaged.add(run_id)
    for run_id, own, model, engine, ms, n in conn.execute(sql["ttft"]):
        hist = out[(run_id, own, model, engine)].ttft
        bucket = ttft_bucket(int(ms))
        hist[bucket] = hist.get(bucket, 0) + n
    for totals in out.values():
        totals.ttft_check = ttft_check(totals.ttft.items())
    return out, damaged


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


def heads(conn: Connection, run_ids: Iterable[str]) -> dict[str, str]:
    return dict(conn.execute(select(RUNS.c.id, RUNS.c.chain_head).where(RUNS.c.id.in_(list(run_ids)))).all())


def as_rows(totals: Mapping[Key, Totals],
            head_of: Mapping[str, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(totals rows, TTFT rows) to insert."""
    rows, ttfts = [], []
    model_rows = Counter((run_id, own) for run_id, own, model, _ in totals if model is not None)
    for (run_id, own, model, engine), t in sorted(totals.items(), key=lambda kv: order(kv[0])):
        key = {"run_id": run_id, "own": own, "model": model, "engine": engine}
        figures = canonical([getattr(t, name) for name in FIGURES])
        tools = totals.get((run_id, own, None, None))
        hashed = in_run(figures, model, float(tools.tool_s) if tools else 0.0, model_rows[(run_id, own)])
        rows.append({**key, **dict(zip(FIGURES, figures, strict=True)),
                     "digest": digest(head_of[run_id], (run_id, own, model, engine), hashed)})
        ttfts += [{**key, "bucket_ms": b, "calls": n} for b, n in sorted(t.ttft.items())]
    return rows, ttfts


def from_row(row: Mapping[Any, Any]) -> tuple[Key, Totals]:
    # By name: the bench's released readers pass the figures of their schema, fewer than ``Totals`` holds.
    return (row["run_id"], row["own"], row["model"], row["engine"]), Totals(**{name: row[name] for name in FIGURES})


def order(key: Key) -> tuple[str, int, bool, str, str]:
    run_id, own, model, engine = key
    return run_id, own, model is not None, model or "", engine or ""


def has_totals() -> Any:
    """A condition on ``runs``: the run has stored totals."""
    marker = TOTALS.alias("marker")
    return exists().where(marker.c.run_id == RUNS.c.id, marker.c.own == 1, marker.c.model.is_(None))


def has_any(conn: Connection, run_id: str) -> bool:
    return conn.execute(select(TOTALS.c.id).where(TOTALS.c.run_id == run_id).limit(1)).first() is not None


def stored(conn: Connection, runs: Any) -> dict[Key, Totals]:
    rows = conn.execute(select(TOTALS).join(RUNS, RUNS.c.id == TOTALS.c.run_id).where(runs)).mappings()
    out = {}
    for row in rows:
        check_row(TOTALS, row)
        key, totals = from_row(row)
        out[key] = totals
    for row in conn.execute(select(TTFTS).join(RUNS, RUNS.c.id == TTFTS.c.run_id).where(runs)).mappings():
        check_row(TTFTS, row)
        hist = out.setdefault((row["run_id"], row["own"], row["model"], row["engine"]), Totals()).ttft
        hist[row["bucket_ms"]] = hist.get(row["bucket_ms"], 0) + row["calls"]
    return out


