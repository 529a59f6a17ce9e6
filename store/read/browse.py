"""Paginated reads for browsing a store (``escrow view``): a filtered, sorted
page of runs with their totals, the values the filters offer, and a run's
chain positions. One SQL statement per page; nothing loads every run.
A run's turns are read by ``store.read.turn_browse``.

``has_batches`` says whether a ``batches`` table exists (stores from before
schema 5 have none), so the runs page offers the batch filter only then.
"""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import (
    Connection,
    MetaData,
    Select,
    Table,
    func,
    inspect,
    literal,
    select,
    union_all,
)

from orchestrator.contract import Frozen
from orchestrator.trajectory import (
    RunSummary,
    RunTotals,
    RunView,
)
from store.read import liveness
from store.read.reader import run_totals, view
from store.schema.tables import (
    CHAINED,
    BatchAttemptRow,
    ModelResponse,
    Run,
    Turn,
    table_of,
)

SortKey = Literal["started", "cost", "turns", "tokens", "verdict", "model"]
SORT_KEYS: tuple[str, ...] = ("started", "cost", "turns", "tokens", "verdict", "model")
BATCH_TABLE = "batches"

RUNS: Table = table_of(Run)
RESPONSES: Table = table_of(ModelResponse)
TURNS: Table = table_of(Turn)


class RunFilter(Frozen):
    """What the runs page asks for. Unset fields do not filter."""

    verdict: str | None = None
    model: str | None = None
    batch: str | None = None
    text: str | None = None
    since: float | None = None
    until: float | None = None
    min_cost: float | None = None
    max_cost: float | None = None
    min_turns: int | None = None
    max_turns: int | None = None
    sort: SortKey = "started"
    descending: bool = True
    page: int = 1
    per_page: int = 50

    @property
    def needs_totals(self) -> bool:
        """Whether the query must aggregate every matching run (not only the page)."""
        return self.sort in ("cost", "turns", "tokens") or any(
            v is not None for v in (self.min_cost, self.max_cost, self.min_turns, self.max_turns))


class RunPage(Frozen):
    runs: tuple[RunSummary, ...]
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))


class Facets(Frozen):
    """The values the runs page offers in its drop-downs."""

    verdicts: tuple[str, ...]
    models: tuple[str, ...]
    batches: tuple[str, ...] | None
    """None while the store has no batch table."""


class ChainPosition(Frozen):
    seq: int
    table: str
    id: str
    turn: int | None
    chain_hash: str


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def has_batches(conn: Connection) -> bool:
    return inspect(conn).has_table(BATCH_TABLE)


def _per_run_totals() -> dict[str, Any]:
    """Correlated subqueries, one index search per run: tokens and turns are
    read off covering indexes, cost from the responses' rows."""
    tokens = RESPONSES.c["gen_ai.usage.input_tokens"] + RESPONSES.c["gen_ai.usage.output_tokens"]
    return {
        "cost": select(func.coalesce(func.sum(RESPONSES.c.cost_usd), 0.0))
        .where(RESPONSES.c.run_id == RUNS.c.id)
        .scalar_subquery(),
        "tokens": select(func.coalesce(func.sum(tokens), 0)).where(RESPONSES.c.run_id == RUNS.c.id).scalar_subquery(),
        "turns": select(func.count()).where(TURNS.c.run_id == RUNS.c.id).scalar_subquery(),
    }


def _filtered(stmt: Select[Any], f: RunFilter) -> Select[Any]:
    for column, wanted in ((RUNS.c.verdict, f.verdict), (RUNS.c["gen_ai.request.model"], f.model)):
        if wanted:
            stmt = stmt.where(column == wanted)
    if f.text:
        stmt = stmt.where(RUNS.c.task.like(f"%{_escape_like(f.text)}%", escape="\\"))
    if f.since is not None:
        stmt = stmt.where(RUNS.c.created_at >= f.since)
    if f.until is not None:
        stmt = stmt.where(RUNS.c.created_at < f.until)
    return stmt


def page_runs(conn: Connection, f: RunFilter) -> RunPage:
    """One page of runs matching ``f``, with the total count. Cost and turn
    bounds and sorts are computed per matching run in the same statement;
    otherwise only the page's runs are aggregated."""
    ids = _filtered(select(RUNS.c.id), f)
    keyed = _per_run_totals() if f.needs_totals else {}
    bounds: tuple[tuple[Any, float | None, float | None], ...] = (
        (keyed.get("cost"), f.min_cost, f.max_cost),
        (keyed.get("turns"), f.min_turns, f.max_turns),
    )
    for column, low, high in bounds:
        if low is not None:
            ids = ids.where(column >= low)
        if high is not None:
            ids = ids.where(column <= high)
    if f.batch:
        attempts = table_of(BatchAttemptRow)
        ids = ids.where(RUNS.c.id.in_(select(attempts.c.run_id).where(attempts.c.batch_id == f.batch)))
    plain = {"verdict": RUNS.c.verdict, "model": RUNS.c["gen_ai.request.model"]}
    sort_column = keyed[f.sort] if f.sort in keyed else plain.get(f.sort, RUNS.c.created_at)
    order = [sort_column.desc() if f.descending else sort_column.asc()]
    if sort_column is not RUNS.c.created_at:
        order.append(RUNS.c.created_at.desc())
    order.append(RUNS.c.id.desc() if f.descending else RUNS.c.id.asc())
    total = int(conn.execute(select(func.count()).select_from(ids.subquery())).scalar() or 0)
    page = max(1, f.page)
    wanted = list(conn.execute(ids.order_by(*order).limit(f.per_page).offset((page - 1) * f.per_page)).scalars())
    return RunPage(runs=tuple(summaries(conn, wanted)), total=total, page=page, per_page=f.per_page)


def summaries(conn: Connection, ids: list[str]) -> list[RunSummary]:
    if not ids:
        return []
    found = [view(RunView, Run, row) for row in conn.execute(select(RUNS).where(RUNS.c.id.in_(ids))).mappings()]
    rows = {r.id: r for r in liveness.marked(found, conn, liveness.now_or(None))}
    totals = run_totals(conn, ids)
    return [RunSummary(run=rows[i], totals=totals.get(i, RunTotals())) for i in ids if i in rows]


def facets(conn: Connection) -> Facets:
    """Distinct verdicts and models, read off their indexes."""
    verdicts = conn.execute(
        select(RUNS.c.verdict).where(RUNS.c.verdict.is_not(None)).distinct().order_by(RUNS.c.verdict)
    ).scalars()
    model = RUNS.c["gen_ai.request.model"]
    models = conn.execute(select(model).distinct().order_by(model)).scalars()
    batches: tuple[str, ...] | None = None
    if has_batches(conn):
        batches = tuple(
            str(b) for b in conn.execute(select(Table(BATCH_TABLE, MetaData(), autoload_with=conn).c.id)).scalars()
        )
    return Facets(verdicts=tuple(verdicts), models=tuple(models), batches=batches)


def chain_positions(conn: Connection, run_id: str) -> list[ChainPosition]:
    """Every chained row of a run, in chain order: table, id, turn and hash."""
    parts = []
    for model in CHAINED:
        t: Table = table_of(model)
        parts.append(
            select(t.c.seq, literal(t.name).label("tbl"), t.c.id, t.c.turn, t.c.chain_hash).where(t.c.run_id == run_id)
        )
    stmt = union_all(*parts).order_by("seq")
    return [
        ChainPosition(seq=r.seq, table=r.tbl, id=r.id, turn=r.turn, chain_hash=r.chain_hash) for r in conn.execute(stmt)
    ]
