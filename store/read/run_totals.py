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

This module reads: the totals from a run's rows (``compute``) and the
stored ones (``stored``, ``has_totals``). ``totals_figures`` is the rows'
arithmetic and digest, ``totals_write`` writes them with the per-day TTFT
rollup (``ttft_days``), ``ttft_buckets`` is the histograms' arithmetic, and
``store.schema.migrations`` adds and backfills them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Integer, Table, case, cast, exists, func, or_, select

from store.check.cells import check_row, not_a_number
from store.read.ttft_buckets import ttft_bucket, ttft_check
from store.schema.tables import CallAttempt, ModelResponse, Run, RunTotal, RunTtft, ToolExecution, table_of
from store.write.totals_figures import Key, Totals, from_row

TOTALS: Table = table_of(RunTotal)
TTFTS: Table = table_of(RunTtft)
DERIVED: tuple[Table, ...] = (TOTALS, TTFTS)
RUNS: Table = table_of(Run)
RESPONSES: Table = table_of(ModelResponse)
ATTEMPTS: Table = table_of(CallAttempt)
TOOLS: Table = table_of(ToolExecution)
# The tables whose rows ``compute`` sums (with ``runs``' own fork turn): a row
# appended to any other (a teacher's score) leaves a run's figures as they were.
SUMMED_TABLES: frozenset[str] = frozenset((RESPONSES.name, ATTEMPTS.name, TOOLS.name))
MODEL = "gen_ai.request.model"
SUMMED = ("gen_ai.usage.input_tokens", "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.output_tokens",
          "total_s", "decode_s", "ttft_s", "n_attempts")
ATTEMPT_SUMMED = ("duration_s", "backoff_s")
TOOL_SUMMED = ("duration_s",)


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


def heads(conn: Connection, run_ids: Iterable[str]) -> dict[str, str]:
    return dict(conn.execute(select(RUNS.c.id, RUNS.c.chain_head).where(RUNS.c.id.in_(list(run_ids)))).all())


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


