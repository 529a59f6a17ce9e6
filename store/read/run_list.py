"""The runs listing (``escrow runs``): its rows, their JSON form,
and a light reader of a SQLite store file. (The table itself is drawn by
``cli/runs_cmd.py``.)

Listing runs is the store command run most often, and importing SQLAlchemy
and the table models costs most of a second before the first row is read.
``read_run_lines`` reads the page with the standard library's ``sqlite3``
alone, but only in the plain case: a SQLite file at this Escrow's schema,
read without error, every cell of its column's type. In any other case it
returns None and the caller lists through ``Store.runs``, which owns the
error messages (missing file, newer schema, damaged cell). The two paths
give the same lines (tests/store/test_run_list.py compares them).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.source_figures import IMPORT_EVENT, add_run_level, counted_run_level
from orchestrator.terminal_text import one_line
from store.schema.version import LATEST
from store.text_codec import escape, unescape

if TYPE_CHECKING:
    from orchestrator.trajectory import RunSummary

# RunView's fields in order, with the column each is read from.
RUN_FIELDS: tuple[tuple[str, str], ...] = (
    ("id", "id"), ("created_at", "created_at"), ("finished_at", "finished_at"), ("task", "task"),
    ("repo", "repo"), ("mode", "mode"), ("request_model", "gen_ai.request.model"), ("config_json", "config_json"),
    ("policy_json", "policy_json"), ("parent_run_id", "parent_run_id"), ("forked_at_turn", "forked_at_turn"),
    ("escrow_version", "escrow_version"), ("status", "status"), ("verdict", "verdict"),
    ("verdict_detail", "verdict_detail"), ("chain_seq", "chain_seq"), ("chain_head", "chain_head"),
)
# The runs columns stored in the escaped text form (store.text_escape).
ESCAPED_RUN_COLUMNS = frozenset(
    {"task", "repo", "gen_ai.request.model", "config_json", "policy_json", "verdict_detail"}
)
FILTERS = {"status": "status", "verdict": "verdict", "model": "gen_ai.request.model"}
# store.read.liveness's two words, spelled here so that this reader imports no SQLAlchemy.
CRASHED, RUNNING = "crashed", "running"
_EMPTY_TOTALS: dict[str, Any] = {
    "turns": 0, "calls": 0, "input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0, "cost_usd": None,
}
# The token figures a server may not send: None in a listing when no call
# reported one and the source gives none run-level (absent, never 0).
REPORTED = ("input_tokens", "cached_input_tokens", "output_tokens")


@dataclass(frozen=True)
class RunLine:
    """One listed run: its columns by RunView's field names, and its totals
    by RunTotals' field names."""

    run: Mapping[str, Any]
    totals: Mapping[str, Any] = field(default_factory=lambda: dict(_EMPTY_TOTALS))

    @classmethod
    def of(cls, summary: RunSummary) -> RunLine:
        # The keys this module's own reader gives, so that both paths list alike.
        totals = summary.totals
        return cls(run=summary.run.model_dump(), totals={
            **totals.model_dump(include=set(_EMPTY_TOTALS)), **{name: totals.reported(name) for name in REPORTED}})


def when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def clip(text: str, width: int) -> str:
    return one_line(text, width)


def runs_json(lines: list[RunLine]) -> list[dict[str, Any]]:
    return [{**line.run, "totals": dict(line.totals)} for line in lines]


def sqlite_file(url: str) -> Path | None:
    """The file of a plain ``sqlite:///PATH`` URL; None for any other URL
    (PostgreSQL, in-memory, query parameters), which the full store reads."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or "?" in url or len(url) == len(prefix):
        return None
    return Path(url[len(prefix):])


class _NotPlain(Exception):
    """The light reader met something only the full store judges."""


@dataclass(frozen=True)
class RunQuery:
    """Which runs to list: ``Store.runs``'s arguments."""

    status: str | None = None
    verdict: str | None = None
    model: str | None = None
    since: float | None = None
    until: float | None = None
    limit: int = 50


def read_run_lines(path: Path, query: RunQuery = RunQuery(), *, now: float | None = None) -> list[RunLine] | None:
    """The page ``Store.runs`` would list (with crashed runs marked, as
    ``store.write.batches.mark_crashed`` does), or None when the full store must
    read it."""
    if not path.is_file():
        return None
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            conn.row_factory = sqlite3.Row
            return _read(conn, query, time.time() if now is None else now)
    except (sqlite3.Error, _NotPlain, UnicodeDecodeError, ValueError, TypeError):
        return None


def _read(conn: sqlite3.Connection, query: RunQuery, now: float) -> list[RunLine]:
    version = conn.execute("SELECT max(version) FROM escrow_migrations").fetchone()[0]
    if version != LATEST:
        raise _NotPlain(f"schema {version}")
    where: list[str] = []
    params: dict[str, Any] = {}
    for name in FILTERS:
        wanted = getattr(query, name)
        if wanted is not None:
            column = FILTERS[name]
            where.append(f'"{column}" = :{name}')
            params[name] = escape(wanted) if column in ESCAPED_RUN_COLUMNS else wanted
    if query.status in (CRASHED, RUNNING):  # store.read.liveness.status_clause: both are stored as running
        params["status"] = RUNNING
        where.append(("" if query.status == CRASHED else "NOT ") + "EXISTS (SELECT 1 FROM run_leases l "
                     "WHERE l.run_id = runs.id AND l.expires_at < :now)")
        params["now"] = now
    if query.since is not None:
        where.append("created_at >= :since")
        params["since"] = query.since
    if query.until is not None:
        where.append("created_at < :until")
        params["until"] = query.until
    columns = ", ".join(f'"{column}"' for _, column in RUN_FIELDS)
    sql = (f"SELECT {columns} FROM runs {'WHERE ' + ' AND '.join(where) if where else ''} "
           "ORDER BY created_at DESC, id DESC LIMIT :limit")
    rows = conn.execute(sql, {**params, "limit": query.limit}).fetchall()
    declared = _declared_types(conn, "runs")
    page = [_run(row, declared) for row in rows]
    ids = [r["id"] for r in page]
    totals = _totals(conn, ids)
    crashed = _crashed(conn, ids, now)
    return [RunLine(run={**r, "status": CRASHED, "last_alive_at": crashed[r["id"]]} if r["id"] in crashed else r,
                    totals=totals.get(r["id"], dict(_EMPTY_TOTALS))) for r in page]


def _declared_types(conn: sqlite3.Connection, table: str) -> dict[str, tuple[type, ...]]:
    """What Python values each column may hold, from the table's declared types."""
    out: dict[str, tuple[type, ...]] = {}
    for row in conn.execute(f'PRAGMA table_info("{table}")'):
        declared = str(row["type"]).upper()
        kinds: tuple[type, ...] = (int,) if declared == "INTEGER" else (str,)
        out[row["name"]] = (float, int) if declared in ("FLOAT", "REAL") else kinds
    return out


def _run(row: sqlite3.Row, declared: dict[str, tuple[type, ...]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, column in RUN_FIELDS:
        value = row[column]
        if value is not None and (isinstance(value, bool) or not isinstance(value, declared[column])):
            raise _NotPlain(f"runs.{column}")  # the full store names the damaged cell
        out[name] = unescape(value) if column in ESCAPED_RUN_COLUMNS and isinstance(value, str) else value
    out["last_alive_at"] = None
    if isinstance(out["created_at"], int):
        out["created_at"] = float(out["created_at"])
    if isinstance(out["finished_at"], int):
        out["finished_at"] = float(out["finished_at"])
    return out


def _in(ids: Iterable[str]) -> tuple[str, list[str]]:
    listed = list(ids)
    return ", ".join("?" * len(listed)), listed


def _totals(conn: sqlite3.Connection, ids: list[str]) -> dict[str, dict[str, Any]]:
    if not ids:
        return {}
    marks, args = _in(ids)
    numeric = [name for name, kinds in _declared_types(conn, "model_responses").items() if kinds != (str,)]
    damaged = " OR ".join(f"typeof(\"{c}\") NOT IN ('integer', 'real', 'null')" for c in numeric)
    if conn.execute(f"SELECT 1 FROM model_responses WHERE run_id IN ({marks}) AND ({damaged}) LIMIT 1",
                    args).fetchone():
        raise _NotPlain("model_responses")
    found: dict[str, dict[str, Any]] = {}
    for table, key in (("model_calls", "calls"), ("turns", "turns")):
        for run_id, n in conn.execute(
                f"SELECT run_id, count(*) FROM {table} WHERE run_id IN ({marks}) GROUP BY run_id", args):
            found.setdefault(run_id, dict(_EMPTY_TOTALS))[key] = n
    absent = ", ".join(f"sum(\"{name}_source\" = 'absent')" for name in REPORTED)
    for run_id, tin, tcached, tout, cost, n, *unreported in conn.execute(
        'SELECT run_id, sum("gen_ai.usage.input_tokens"), sum("gen_ai.usage.cache_read.input_tokens"), '
        f'sum("gen_ai.usage.output_tokens"), sum(cost_usd), count(*), {absent} FROM model_responses '
        f"WHERE run_id IN ({marks}) GROUP BY run_id", args,
    ):
        totals = found.setdefault(run_id, dict(_EMPTY_TOTALS))
        totals.update(input_tokens=tin or 0, cached_input_tokens=tcached or 0, output_tokens=tout or 0, cost_usd=cost)
        totals.update({name: None for name, count in zip(REPORTED, unreported, strict=True) if count >= n})
    for run_id, data_json in conn.execute(
            f"SELECT run_id, data_json FROM events WHERE run_id IN ({marks}) AND kind = ? AND turn IS NULL",
            [*args, IMPORT_EVENT]):
        counted = counted_run_level(unescape(data_json)) if isinstance(data_json, str) else None
        if counted is not None:  # an imported run's run-level figures no call gives
            add_run_level(found.setdefault(run_id, dict(_EMPTY_TOTALS)), counted)
    return found


def _crashed(conn: sqlite3.Connection, ids: list[str], now: float) -> dict[str, float]:
    """Listed runs still ``running`` whose lease expired, with their last
    heartbeat (``store.read.liveness.lapsed``)."""
    if not ids:
        return {}
    marks, args = _in(ids)
    rows = conn.execute(
        f"SELECT r.id, l.heartbeat_at FROM runs r JOIN run_leases l ON l.run_id = r.id WHERE r.id IN ({marks}) "
        "AND r.status = 'running' AND l.expires_at < ?", [*args, now])
    found = {}
    for run_id, at in rows:
        if not isinstance(at, (int, float)) or isinstance(at, bool):
            raise _NotPlain("run_leases.heartbeat_at")
        found[run_id] = float(at)
    return found
