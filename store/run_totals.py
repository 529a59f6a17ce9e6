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
either way, and ``problems`` names a run whose stored totals differ from its
rows. A run with a cell that is not a number gets no totals: the report then
reads its rows and stops on the damaged cell, as before.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Index,
    Integer,
    Table,
    and_,
    case,
    cast,
    delete,
    exists,
    func,
    inspect,
    or_,
    select,
    true,
)
from sqlmodel import Field, SQLModel

from store.cells import check_row, not_a_number
from store.tables import CallAttempt, ModelResponse, Run, ToolExecution, outside, table_of

TTFT_CHECK_MODULUS = 2_147_483_647
"""A prime below 2**31, so a check fits every SQL integer column."""
TTFT_BITS = 5
"""Significant bits a TTFT keeps, in milliseconds: exact below 32 ms, then 16
buckets an octave, reported at their midpoint (within 1/32 of the value)."""
BACKFILL_RUNS = 200


class RunTotal(SQLModel, table=True):
    __tablename__ = "run_totals"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id", index=True)
    own: int
    model: str | None = outside(default=None)
    engine: str | None = outside(default=None)
    calls: int
    prompt_tokens: int
    cached_tokens: int
    cached_reported: int | None = None
    """How many of the row's calls carried a cached count (schema 12): with
    none, ``cached_tokens`` is absent, not 0."""
    output_tokens: int
    direct_s: float
    http_s: float
    wait_s: float
    decode_s: float
    retries: int
    ttft_check: int | None = None
    """The row's TTFT buckets folded into one number (``ttft_check``), so the
    TTFT rollups a report sums can be checked against the digested totals
    of the runs they sum (schema 11)."""
    tool_s: float
    digest: str | None = None
    """sha256 of the run's chain head when the row was computed, the row's
    key and figures (``digest``): checked by every report that reads the row."""


class RunTtft(SQLModel, table=True):
    """How many of a totals row's calls had their TTFT in one bucket."""

    __tablename__ = "run_ttfts"
    # Covering: a report sums a window's buckets without reading the table's rows.
    __table_args__ = (Index("ix_run_ttfts_run", "run_id", "own", "model", "engine", "bucket_ms", "calls"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id")
    own: int
    model: str | None = outside(default=None)
    engine: str | None = outside(default=None)
    bucket_ms: int
    calls: int


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


def ttft_bucket(ms: int) -> int:
    """The lower bound of the bucket ``ms`` falls in (see ``TTFT_BITS``)."""
    if ms < 1 << TTFT_BITS:
        return ms
    shift = ms.bit_length() - TTFT_BITS
    return (ms >> shift) << shift


@functools.cache
def bucket_weight(bucket_ms: int) -> int:
    """A bucket's weight in ``ttft_check``: a hash, so that calls moved from
    one bucket to another change the check as surely as calls added."""
    raw = hashlib.sha256(b"escrow ttft bucket %d" % bucket_ms).digest()
    return int.from_bytes(raw[:8], "little") % TTFT_CHECK_MODULUS


def ttft_check(counts: Iterable[tuple[int, int]]) -> int:
    """(bucket, calls) pairs folded into one number: the sum of each bucket's
    weight times its calls, modulo a prime. It adds up: the check of a sum of
    histograms (a day's rollup, a group's) is the sum of their checks, so a
    report compares the rollup rows it summed with the totals of their runs."""
    return sum(bucket_weight(bucket) * calls for bucket, calls in counts) % TTFT_CHECK_MODULUS


def bucket_seconds(lower: int) -> float:
    """The TTFT a bucket stands for: its midpoint, in seconds."""
    width = 1 << max(0, lower.bit_length() - TTFT_BITS) if lower >= 1 << TTFT_BITS else 1
    return (lower + (width - 1) / 2) / 1000.0


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


def write(conn: Connection, run_ids: Iterable[str], days: bool = True) -> None:
    """Write the totals of these runs (in the caller's transaction), replacing
    any; a run with a damaged cell gets none. ``days``: the per-day TTFT
    rollup follows (schema 9; not while migration 8 backfills, before it exists)."""
    from store import ttft_days  # it reads this module's tables

    ids = list(run_ids)
    if not ids:
        return
    before = ttft_days.sums(conn, RUNS.c.id.in_(ids))[0] if days else {}
    for table in DERIVED:
        conn.execute(delete(table).where(table.c.run_id.in_(ids)))
    totals, damaged = compute(conn, RUNS.c.id.in_(ids))
    kept = {k: t for k, t in totals.items() if k[0] not in damaged}
    for table, rows in zip(DERIVED, as_rows(kept, heads(conn, {k[0] for k in kept})), strict=True):
        if rows:
            conn.execute(table.insert(), rows)
    if days:
        ttft_days.moved(conn, before, ttft_days.sums(conn, RUNS.c.id.in_(ids))[0])


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


def problems(conn: Connection, run_id: str | None = None) -> dict[str, str]:
    """Per run whose stored totals are not what its rows add up to, what differs."""
    runs = and_(true() if run_id is None else RUNS.c.id == run_id, has_totals())
    have = stored(conn, runs)
    want, _ = compute(conn, runs)
    found: dict[str, str] = {}
    for key in sorted(have.keys() | want.keys(), key=order):
        if have.get(key) != want.get(key) and key[0] not in found:
            found[key[0]] = (f"run_totals for model {key[2]!r}, engine {key[3]!r}, own {key[1]} are "
                             f"{have.get(key)}, the run's rows add up to {want.get(key)}")
    for run, problem in digest_problems(conn, runs).items():
        found.setdefault(run, problem)
    return found


def digest_problems(conn: Connection, runs: Any) -> dict[str, str]:
    """Per run, the first totals row whose stored digest is not the one its
    figures and its run's chain head give now, as a report recomputes it
    (``aggregate_query.unchecked``): a digest altered, or the row stale."""
    rows = [dict(r) for r in conn.execute(
        select(TOTALS, RUNS.c.chain_head).join(RUNS, RUNS.c.id == TOTALS.c.run_id).where(runs)
        .order_by(TOTALS.c.id)).mappings()]
    for row in rows:
        check_row(TOTALS, row)
    model_rows = Counter((r["run_id"], r["own"]) for r in rows if r["model"] is not None)
    tool_s = {(r["run_id"], r["own"]): r["tool_s"] for r in rows if r["model"] is None}
    found: dict[str, str] = {}
    for r in rows:
        run_id, own, model, engine = r["run_id"], r["own"], r["model"], r["engine"]
        figures = tuple(r[name] for name in FIGURES)
        hashed = in_run(figures, model, tool_s.get((run_id, own), 0.0), model_rows[(run_id, own)])
        head = r["chain_head"] if isinstance(r["chain_head"], str) else ""
        if digest(head, (run_id, own, model, engine), hashed) != r["digest"] and run_id not in found:
            found[run_id] = (f"run_totals row {r['id']} (model {model!r}, engine {engine!r}, own {own}): its "
                             f"digest is not the one its figures and the run's chain head give")
    return found


def add_table(conn: Connection) -> None:
    """The totals table (idempotent: re-run when an upgrade resumes)."""
    SQLModel.metadata.create_all(conn, tables=list(DERIVED))


def add_ttft_check(conn: Connection) -> None:
    """Schema 11: the TTFT check column, and schema 12's count of calls
    that reported a cached count with it: this schema's backfill writes
    rows as ``write`` does today (idempotent: re-run when an upgrade resumes)."""
    _add_columns(conn, {"ttft_check": "INTEGER", "cached_reported": "INTEGER"})


def add_cached_reported(conn: Connection) -> None:
    """Schema 12: the count of calls that reported a cached count
    (idempotent: re-run when an upgrade resumes)."""
    _add_columns(conn, {"cached_reported": "INTEGER"})


def backfill_cached_reported(engine: Engine, batch_runs: int | None = None) -> None:
    """Every run's totals computed again from its rows, now with how many of
    their calls reported a cached count (and digests over it), as
    ``backfill_digests`` does."""
    _rewrite(engine, lambda marker: marker.c.cached_reported.is_(None), batch_runs)


def _add_columns(conn: Connection, columns: Mapping[str, str]) -> None:
    have = {c["name"] for c in inspect(conn).get_columns(TOTALS.name)}
    for name, sql_type in columns.items():
        if name not in have:
            conn.exec_driver_sql(f"ALTER TABLE {TOTALS.name} ADD COLUMN {name} {sql_type}")


def backfill_ttft_checks(engine: Engine, batch_runs: int | None = None) -> None:
    """Every run's totals computed again from its rows, now with their TTFT
    checks (and digests over them), as ``backfill_digests`` does."""
    _rewrite(engine, lambda marker: marker.c.ttft_check.is_(None), batch_runs)


def add_digest(conn: Connection) -> None:
    """Schema 10: the digest column, and schema 11's TTFT check and schema
    12's cached count with it: this schema's backfill writes rows as
    ``write`` does today, with all three (idempotent: re-run when an upgrade resumes)."""
    _add_columns(conn, {"digest": "VARCHAR", "ttft_check": "INTEGER", "cached_reported": "INTEGER"})


def backfill_digests(engine: Engine, batch_runs: int | None = None) -> None:
    """Every run's totals computed again from its rows, now with their digests,
    a batch of runs per transaction in id order, so an upgrade killed at any
    point resumes. Recomputed, not stamped as they are: totals altered before
    the upgrade are not vouched for by it."""
    _rewrite(engine, lambda marker: marker.c.digest.is_(None), batch_runs)


def _rewrite(engine: Engine, lacking: Any, batch_runs: int | None) -> None:
    """Recompute the totals of every run whose tool seconds row is ``lacking``
    a column, a batch of runs per transaction in id order (resumable)."""
    marker = TOTALS.alias("marker")
    undigested = exists().where(marker.c.run_id == RUNS.c.id, marker.c.own == 1, marker.c.model.is_(None),
                                lacking(marker))
    after = ""
    while True:
        with engine.begin() as conn:
            ids = list(conn.execute(select(RUNS.c.id).where(RUNS.c.id > after, undigested)
                                    .order_by(RUNS.c.id).limit(batch_runs or BACKFILL_RUNS)).scalars())
            if not ids:
                return
            write(conn, ids)
            after = ids[-1]


def backfill(engine: Engine, batch_runs: int | None = None) -> None:
    """Totals for every finished run that has none, a batch of runs per
    transaction in id order, so an upgrade killed at any point resumes."""
    after = ""
    while True:
        with engine.begin() as conn:
            ids = list(conn.execute(
                select(RUNS.c.id).where(RUNS.c.id > after, RUNS.c.status == "finished", ~has_totals())
                .order_by(RUNS.c.id).limit(batch_runs or BACKFILL_RUNS)).scalars())
            if not ids:
                return
            write(conn, ids, days=False)  # migration 9 builds the rollup from all of them
            after = ids[-1]
