"""The figures behind ``escrow report --since/--until --by``: one slice per
(run, model), or per (run, model, engine) when grouping by engine, and a
histogram of the calls' TTFTs per group, for runs started in a time window.

A finished run is read from its stored totals (``store.read.run_totals``, schema
8): a few rows a run, whatever its length. A run without them (still running,
crashed, or with a damaged cell) is read from its rows, through the same
``run_totals.compute`` the totals were written with, so both give the same
figures. ``raw=True`` reads every run from its rows (the bench's "before" and
the test that compares the two). Cached tokens are clamped to each call's
prompt tokens, so sums can be priced linearly, and absent (None) in a slice
none of whose calls reported a cached count. Which runs are read how is
``report_window``; the TTFT histogram ``ttft_histogram``; the checks made
before rows are summed ``report_checks``.
"""

from __future__ import annotations

import operator
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, String, and_, case, func, select, true, type_coerce

from orchestrator.costing.figures import RunSlice, keyer
from orchestrator.interop.records import IMPORT_MODE
from orchestrator.source_figures import IMPORT_EVENT, counted_run_level
from store.check.cells import check_numbers, check_row
from store.engine import driver_rows
from store.errors import RollupMismatch, StoreDamaged
from store.read import run_totals
from store.read.liveness import CRASHED, RUNNING, lapsed, now_or
from store.read.reports.report_checks import check_attribution, check_unsummed
from store.read.reports.report_window import (
    BATCH_ATTEMPTS,
    NUMBER_TYPES,
    RESPONSES,
    off_types,
    source_sql,
    unsummed,
    window,
)
from store.read.reports.ttft_histogram import ttft_histogram
from store.read.run_totals import RUNS, TOOLS, TOTALS
from store.read.ttft_buckets import TTFT_CHECK_MODULUS
from store.schema.tables import CallAttempt, EventRow, table_of
from store.store import Store
from store.text_codec import unescape
from store.write import totals_figures
from store.write.totals_figures import Key, Totals

EVENTS = table_of(EventRow)
Figures = tuple[Any, ...]
"""A totals row's figures, in ``totals_figures.FIGURES`` order."""
ZERO: Figures = tuple(getattr(Totals(), name) for name in totals_figures.FIGURES)
TOOL_S = totals_figures.FIGURES.index("tool_s")
ATTEMPTS = table_of(CallAttempt)


RUN_COLUMNS = ("created_at", "status", "verdict", "source")
"""The run's columns a slice carries, after its key, in the totals rows."""


MARKER = TOTALS.alias("marker")
"""A run's own tool seconds row: every run with totals has one (``run_totals.has_totals``)."""


def _with_marker() -> Any:
    return RUNS.join(MARKER, and_(MARKER.c.run_id == RUNS.c.id, MARKER.c.own == 1, MARKER.c.model.is_(None)))


def totals_query(since: float | None, until: float | None, include_replays: bool = False,
                 dialect: str = "sqlite") -> Any:
    """Stored totals of the runs in the window that have them, one tuple per
    (run, spend flag, model, engine) with a model: key, the run's
    ``RUN_COLUMNS``, figures, the run's own tool seconds (its marker
    row's, joined here instead of tested for), what checks them
    (``CHECKS``), then the marker's run id (NULL: the run has no totals)."""
    # Model and engine as stored (escaped): ``_stored`` unescapes each distinct name once.
    names = [type_coerce(TOTALS.c[name], String).label(name) for name in ("model", "engine")]
    run = [RUNS.c.created_at, RUNS.c.status, RUNS.c.verdict, source_sql(dialect).label("source")]
    figures = [TOTALS.c[name] for name in totals_figures.FIGURES]
    spend = true() if include_replays else TOTALS.c.own == 1
    # Outer: a run whose marker has no model row left still gives a row (its
    # figures NULL), so that a deleted or re-flagged last row is checked too;
    # and a run without totals (no marker) gives one, all NULL but its id and
    # cells, so the report knows to read such runs from their rows without a
    # pass of its own over the window's runs.
    marker = and_(MARKER.c.run_id == RUNS.c.id, MARKER.c.own == 1, MARKER.c.model.is_(None))
    with_totals = RUNS.outerjoin(MARKER, marker).outerjoin(
        TOTALS, and_(TOTALS.c.run_id == MARKER.c.run_id, spend, TOTALS.c.model.is_not(None)))
    return (select(RUNS.c.id, TOTALS.c.own, *names, *run, *figures, MARKER.c.tool_s, *CHECKS, MARKER.c.run_id)
            .select_from(with_totals).where(window(since, until, include_replays)))


CHECKS = (RUNS.c.chain_head, TOTALS.c.digest,
          case((TOTALS.c.model.is_(None), MARKER.c.digest), else_=None).label("marker_digest"))
"""The run's chain head now, the totals row's digest, and the run's marker
row's where no model row came back (a model row's digest covers the run's
tool seconds: ``unchecked``), so most rows fetch one digest, not two."""


def shared_tool_seconds_query(since: float | None, until: float | None) -> Any:
    """With replays counted: the tool seconds rows of forks' shared prefixes
    (spend flag 0) of the same runs: run id, seconds, chain head, digest."""
    return (select(TOTALS.c.run_id, TOTALS.c.tool_s, RUNS.c.chain_head, TOTALS.c.digest)
            .select_from(_with_marker().join(TOTALS, TOTALS.c.run_id == RUNS.c.id))
            .where(window(since, until, True), TOTALS.c.own == 0, TOTALS.c.model.is_(None)))


def unchecked(rows: list[Any], shared: list[Any], names: Mapping[str | None, str | None], first: int) -> set[str]:
    """The runs whose stored totals do not match their digests: altered in
    place, added, deleted, or computed from an older chain head (stale). One
    digest a row: a row with a model also covers its run's tool seconds and
    count of model rows (``totals_figures.in_run``); a run's tool seconds row is
    checked alone only when no model row of its spend flag came back."""
    idle, bad = ZERO[:TOOL_S], set()
    tool_at = first + len(totals_figures.FIGURES)
    head_at, digest_at, marker_at = tool_at + 1, tool_at + 2, tool_at + 3
    own_rows = Counter(r[0] for r in rows if r[1] == 1)
    shared_rows = Counter(r[0] for r in rows if r[1] == 0)  # a fork's prefix may have model rows and no tool row
    shared_tool_s = {run_id: seconds for run_id, seconds, _, _ in shared}
    marker = totals_figures.digester(None, None)
    digests: dict[tuple[Any, Any], Any] = {}  # one digester for each (model, engine) the rows name
    for r in rows:
        run_id, own = r[0], r[1]
        if r[2] is None:  # no model row of the run came back: its tool seconds row says whether it had some
            if marker(r[head_at], run_id, 1, (*idle, r[tool_at], 0)) != r[marker_at]:
                bad.add(run_id)
            continue
        of = digests.get((r[2], r[3]))
        if of is None:
            of = digests[(r[2], r[3])] = totals_figures.digester(names[r[2]], names[r[3]])
        in_run = (r[tool_at], own_rows[run_id]) if own == 1 else (shared_tool_s.get(run_id, 0.0), shared_rows[run_id])
        if of(r[head_at], run_id, own, (*r[first:tool_at], *in_run)) != r[digest_at]:
            bad.add(run_id)
    for run_id, seconds, head, stored in shared:
        if marker(head, run_id, 0, (*idle, seconds, shared_rows[run_id])) != stored:
            bad.add(run_id)
    return bad


RUN_TYPES: tuple[frozenset[type], ...] = (frozenset((float, int)), frozenset((str,)), frozenset((str, type(None))),
                                          frozenset((str,)))
"""The types ``RUN_COLUMNS`` must hold (``RunSlice`` is not validated: a damaged cell is named here)."""


def _stored(conn: Connection, since: float | None, until: float | None,
            include_replays: bool) -> tuple[dict[Key, Figures], dict[str, RunCells], bool]:
    """The window's stored totals, the cells of the runs they belong to, and
    whether a run in the window has none (it is read from its rows)."""
    fetched = driver_rows(conn, totals_query(since, until, include_replays, conn.dialect.name))
    rows = [r for r in fetched if r[-1] is not None]
    without_totals = len(rows) < len(fetched)
    shared = driver_rows(conn, shared_tool_seconds_query(since, until)) if include_replays else []
    # A numeric cell holding text (only SQLite stores one) arrives as str or
    # bytes: one pass over each column's types, the details only when one is off.
    columns, first = list(zip(*rows, strict=True)), 4 + len(RUN_COLUMNS)
    numbers = first + len(totals_figures.FIGURES) + 1  # the figures and the marker's tool seconds
    if (columns and any(off_types(columns[i], NUMBER_TYPES) for i in (1, *range(first, numbers)))
            or off_types((row[1] for row in shared), NUMBER_TYPES)):
        off = {r[0] for r in rows if not {type(v) for v in (r[1], *r[first:numbers])} <= NUMBER_TYPES}
        check_numbers(conn, TOTALS, TOTALS.c.run_id.in_(off | {row[0] for row in shared}))
    if columns and any(off_types(columns[4 + i], allowed) for i, allowed in enumerate(RUN_TYPES)):
        check_runs([r[:1] + r[4:first] for r in rows])
    # Each distinct model and engine name unescaped once.
    names: dict[str | None, str | None] = {None: None}
    names.update({stored: unescape(stored) if isinstance(stored, str) else stored
                  for stored in {*columns[2], *columns[3]}} if columns else {})
    bad = unchecked(rows, shared, names, first)
    if bad:
        raise RollupMismatch(sorted(bad))
    rows = [r for r in rows if r[2] is not None]  # a run without model rows adds no slice
    # Positional: a report reads one row per (run, model), so no mapping per row.
    tool_at = first + len(totals_figures.FIGURES)
    totals: dict[Key, Figures] = {(r[0], r[1], names[r[2]], names[r[3]]): r[first:tool_at] for r in rows}
    idle = ZERO[:TOOL_S]
    totals.update({(r[0], 1, None, None): (*idle, r[tool_at]) for r in rows})
    totals.update({(run_id, 0, None, None): (*idle, seconds) for run_id, seconds, _, _ in shared})
    return totals, {r[0]: r[4:first] for r in rows}, without_totals


RunCells = tuple[Any, ...]
"""A run's ``RUN_COLUMNS``."""


def check_runs(rows: list[tuple[Any, ...]]) -> None:
    """Raise StoreDamaged for the first run (id, ``RUN_COLUMNS``) with a cell of the wrong type."""
    for row in rows:
        check_row(RUNS, dict(zip(("id", *RUN_COLUMNS[:3]), row[:4], strict=True)))
        if not isinstance(row[-1], str):
            raise StoreDamaged(f"damaged store: runs row {row[0]} column config_json holds an import format "
                               f"that is not text", table=RUNS.name, row_id=str(row[0]), column="config_json")


def _runs(conn: Connection, runs: Any) -> dict[str, RunCells]:
    """The ``RUN_COLUMNS`` of the runs ``runs`` (a condition on ``runs``) selects."""
    rows = driver_rows(conn, select(RUNS.c.id, RUNS.c.created_at, RUNS.c.status, RUNS.c.verdict,
                                    source_sql(conn.dialect.name)).where(runs))
    columns = list(zip(*rows, strict=True))
    if columns and any(off_types(columns[1 + i], allowed) for i, allowed in enumerate(RUN_TYPES)):
        check_runs(rows)
    return {r[0]: r[1:] for r in rows}


def _from_rows(conn: Connection, runs: Any, include_replays: bool) -> dict[Key, Figures]:
    """Totals computed from the rows of the runs ``runs`` selects; a damaged cell stops the report."""
    totals, damaged = run_totals.compute(conn, runs)
    if damaged:
        ids = RUNS.c.id.in_(sorted(damaged))
        check_numbers(conn, RESPONSES, RESPONSES.c.run_id.in_(select(RUNS.c.id).where(ids)), run_totals.SUMMED)
        check_numbers(conn, ATTEMPTS, ATTEMPTS.c.run_id.in_(select(RUNS.c.id).where(ids)), run_totals.ATTEMPT_SUMMED)
        check_numbers(conn, TOOLS, TOOLS.c.run_id.in_(select(RUNS.c.id).where(ids)), run_totals.TOOL_SUMMED)
    return {k: tuple(getattr(t, name) for name in totals_figures.FIGURES)
            for k, t in totals.items() if include_replays or k[1] == 1}


def run_slices(conn: Connection, since: float | None, until: float | None, by: str = "model",
               include_replays: bool = False, raw: bool = False, now: float | None = None) -> list[RunSlice]:
    return _run_slices(conn, since, until, by, include_replays, raw, now_or(now)).slices


@dataclass(frozen=True)
class Sliced:
    slices: list[RunSlice]
    from_rows: bool
    """Whether a run in the window was read from its rows."""
    stored_checks: dict[str, int]
    """Per group key, the TTFT checks of the slices read from stored totals:
    what the TTFT rollups summed for the group must add up to."""


def _run_slices(conn: Connection, since: float | None, until: float | None, by: str, include_replays: bool,
                raw: bool, now: float) -> Sliced:
    """The slices, and what checks the TTFT rollups. A running run whose owner
    is gone reads ``crashed``, as in every view."""
    totals, runs, from_rows = ({}, {}, True) if raw else _stored(conn, since, until, include_replays)
    stored_runs = set(runs)
    if from_rows:
        rest = unsummed(since, until, include_replays, raw)
        if not raw:
            check_unsummed(conn, rest)
        runs.update(_runs(conn, rest))
        totals.update(_from_rows(conn, rest, include_replays))
    gone = lapsed(conn, [run_id for run_id, cells in runs.items() if cells[1] == RUNNING], now)
    runs.update({run_id: (cells[0], CRASHED, *cells[2:]) for run_id, cells in runs.items() if run_id in gone})
    if by == "batch":
        check_attribution(conn, window(since, until, include_replays))
    attempts = conn.execute(select(BATCH_ATTEMPTS.c.id, BATCH_ATTEMPTS.c.run_id, BATCH_ATTEMPTS.c.batch_id)
                            .where(BATCH_ATTEMPTS.c.run_id.is_not(None))).mappings().all()
    for attempt in attempts:
        check_row(BATCH_ATTEMPTS, attempt)
    batch_of: dict[str, str] = {a["run_id"]: a["batch_id"] for a in attempts}
    pieces, checks = slices(totals, runs, by == "engine", batch_of)
    expected: dict[str, int] = defaultdict(int)
    key_of = keyer(by)
    for piece, check in zip(pieces, checks, strict=True):
        if check and piece.run_id in stored_runs:
            key = key_of(piece)
            expected[key] += check
    expected = {key: check % TTFT_CHECK_MODULUS for key, check in expected.items()}
    pieces = with_source_figures(conn, pieces, window(since, until, include_replays), batch_of)
    return Sliced(pieces, from_rows, expected)


def with_source_figures(conn: Connection, pieces: list[RunSlice], runs: Any,
                        batch_of: Mapping[str, str]) -> list[RunSlice]:
    """Imported runs' slices with their source's own dollars, and a run-level
    slice per imported run whose source gives run-level figures no call
    gives. Read from the chained rows (the responses' ``cost_usd``, the
    import event), not from derived totals, so the rollup digests are not
    touched and ``escrow verify`` vouches for what is summed."""
    imported = and_(runs, RUNS.c.mode == IMPORT_MODE)
    # One pass over the window's runs first: a fleet of Escrow's own runs
    # then costs no query over its responses (the join's plan scans them).
    if conn.execute(select(RUNS.c.id).where(imported).limit(1)).first() is None:
        return pieces
    model = RESPONSES.c[run_totals.MODEL]
    costs = {(run_id, unescape(m) if isinstance(m, str) else m): (total, n) for run_id, m, total, n in driver_rows(
        conn, select(RESPONSES.c.run_id, model, func.sum(RESPONSES.c.cost_usd), func.count(RESPONSES.c.cost_usd))
        .select_from(RUNS.join(RESPONSES, RESPONSES.c.run_id == RUNS.c.id)).where(imported)
        .group_by(RESPONSES.c.run_id, model))}
    out = [p._replace(source_usd=float(costs[(p.run_id, p.model)][0]))
           if costs.get((p.run_id, p.model), (None, 0))[1] else p for p in pieces]
    levels = conn.execute(
        select(RUNS.c.id, RUNS.c.created_at, RUNS.c.status, RUNS.c.verdict, source_sql(conn.dialect.name),
               RUNS.c[run_totals.MODEL], EVENTS.c.data_json)
        .select_from(RUNS.join(EVENTS, EVENTS.c.run_id == RUNS.c.id))
        .where(imported, EVENTS.c.kind == IMPORT_EVENT, EVENTS.c.turn.is_(None))).all()
    for run_id, created, status, verdict, source, run_model, data in sorted(levels):
        counted = counted_run_level(data)
        if counted is None:
            continue
        out.append(RunSlice(
            run_id=run_id, created_at=float(created), status=status, verdict=verdict, model=run_model,
            source=source, calls=0, prompt_tokens=counted.get("prompt_tokens") or 0,
            cached_tokens=None if counted.get("cached_tokens") is None
            else min(counted["cached_tokens"], counted.get("prompt_tokens") or 0),
            completion_tokens=counted.get("completion_tokens") or 0, gpu_s=0.0, decode_s=0.0, retries=0,
            batch=batch_of.get(run_id), source_usd=counted.get("cost_usd"), run_level=True,
        ))
    return out


def slices(totals: Mapping[Key, Figures], runs: Mapping[str, RunCells], by_engine: bool,
           batch_of: Mapping[str, str]) -> tuple[list[RunSlice], list[int]]:
    """Totals folded into slices, in one fixed order (so the float sums come
    out the same whichever way the totals were read), and each slice's TTFT
    check (``ttft_buckets.ttft_check``)."""
    # Keys gathered by slot first: most slots have one row, taken as it is;
    # a slot of several (engines under one model, or both spend flags) adds
    # them in ``totals_figures.order``, as does a run's tool seconds.
    parts: dict[tuple[str, str, str], list[Key]] = defaultdict(list)
    idle: dict[str, list[Key]] = defaultdict(list)
    for key in totals:
        run_id, _, model, engine = key
        if model is None:
            idle[run_id].append(key)
        else:
            parts[(run_id, model, (engine or "") if by_engine else "")].append(key)
    tool_s: dict[str, float] = {}
    for run_id, keys in idle.items():
        seconds = 0.0
        for key in (keys if len(keys) == 1 else sorted(keys, key=totals_figures.order)):
            seconds += totals[key][TOOL_S]
        tool_s[run_id] = seconds
    merged: dict[tuple[str, str, str], Figures] = {}
    engines: dict[tuple[str, str, str], str | None] = {}
    for slot, keys in parts.items():
        engines[slot] = keys[0][3] if by_engine else None
        if len(keys) == 1:
            merged[slot] = totals[keys[0]]
            continue
        # Each figure added to the slot's, as ``Totals.add`` does (from zero:
        # the same figures, as x + 0 == x for every figure a slot holds).
        ordered = sorted(keys, key=totals_figures.order)
        figures = totals[ordered[0]]
        for key in ordered[1:]:
            figures = tuple(map(operator.add, figures, totals[key]))
        merged[slot] = figures
    out, checks = [], []
    for slot in sorted(merged):
        figures, run_id = merged[slot], slot[0]
        calls, prompt, cached, reported, output, direct_s, http_s, wait_s, decode_s, retries, check, _ = figures
        if calls == 0 or run_id not in runs:
            continue
        checks.append(check)
        created, status, verdict, source = runs[run_id][:4]
        out.append(RunSlice(
            run_id=run_id, created_at=float(created), status=status, verdict=verdict, model=slot[1], source=source,
            # No call's server sent a cached count: absent, not 0 (``RunSlice.cached_tokens``).
            calls=calls, prompt_tokens=prompt, cached_tokens=cached if reported else None, cached_reported=reported,
            completion_tokens=output,
            gpu_s=direct_s + http_s, wait_s=wait_s, decode_s=decode_s, retries=retries,
            tool_s=tool_s.get(run_id, 0.0), engine=engines[slot], batch=batch_of.get(run_id),
        ))
    return out, checks


def read_slices(store: Store, *, by: str, since: float | None, until: float | None,
                include_replays: bool = False, raw: bool = False, now: float | None = None,
                ) -> tuple[list[RunSlice], list[tuple[str, float, int]]]:
    """The figures an aggregate report is computed from: one slice per (run,
    model) and the TTFT histogram per group. Real spend only, unless
    ``include_replays`` (see ``window``). ``raw``: every run read from its rows."""
    at = now_or(now)  # one moment for both, so a run's status is the same in each
    with store.read() as conn:
        sliced = _run_slices(conn, since, until, by, include_replays, raw, at)
        ttfts = ttft_histogram(conn, since, until, by, include_replays, raw, sliced.from_rows, at,
                               None if raw else sliced.stored_checks)
    return sliced.slices, ttfts
