"""Verifying request blobs (schema 4): each blob against its own sha256, each
request's references against the blobs present, and the chain links of
converted rows over their reassembled text. A damaged blob is reported on
every run that uses it, each naming all of them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Table, select

from orchestrator.canonical import sha256_hex
from store.chain import ChainCheck, ChainRow
from store.schema.tables import ModelCall, table_of
from store.write import blobs

CALLS: Table = table_of(ModelCall)
DAMAGE = (blobs.BlobMissing, ValueError, KeyError, TypeError, AttributeError)


def prepare(conn: Connection, rows: list[ChainRow]) -> tuple[list[ChainRow], dict[str, tuple[str, str]]]:
    """The rows as their links were hashed, and for each run with damaged or
    missing blobs, (the first such blob, the problem)."""
    calls = [r.row for r in rows if r.table == CALLS.name and r.row.get("request_refs")]
    bodies = blobs.load_for(conn, calls)
    damaged = {sha for sha, body in bodies.items() if sha256_hex(body) != sha}
    used: dict[str, set[str]] = defaultdict(set)
    for row in calls:
        blobs.reached(row["request_refs"], bodies, used[str(row.get("run_id"))])
    problems: dict[str, tuple[str, str]] = {}
    owners: dict[str, str] = {}
    for run_id, shas in used.items():
        bad = sorted(shas & damaged) or sorted(shas - bodies.keys())
        if bad:
            if bad[0] not in owners:
                owners[bad[0]] = ", ".join(sorted(runs_using(conn, bad[0])))
            what = "does not match its sha256" if bad[0] in damaged else "is missing from the store"
            problems[run_id] = (bad[0], f"blob {bad[0]} {what}; it belongs to runs {owners[bad[0]]}")
    parsed: dict[str, Any] = {}
    out = []
    for item in rows:
        row = item.row
        if item.table == CALLS.name and row.get("request_refs"):
            try:
                item = ChainRow(table=item.table, row=blobs.hashed_row(row, bodies, parsed))
            except DAMAGE as exc:
                problems.setdefault(str(row.get("run_id")), ("", f"call {row.get('id')} cannot be reassembled: {exc}"))
        out.append(item)
    return out, problems


def flag(checks: Iterable[ChainCheck], problems: dict[str, tuple[str, str]]) -> list[ChainCheck]:
    """Mark runs whose blobs are damaged or missing; that is the cause named
    even where a converted row's link then fails too."""
    out = []
    for check in checks:
        found = problems.get(check.run_id)
        if found:
            check = check.model_copy(
                update={"ok": False, "problem": found[1], "table": blobs.BLOBS.name, "row_id": found[0]}
            )
        out.append(check)
    return out


def runs_using(conn: Connection, sha: str) -> set[str]:
    """Every run one of whose requests reaches the blob (a scan of the store,
    made only when a damaged blob was found)."""
    by_run: dict[str, list[Any]] = defaultdict(list)
    for run_id, refs in conn.execute(
        select(CALLS.c.run_id, CALLS.c.request_refs).where(CALLS.c.request_refs.is_not(None))
    ):
        by_run[run_id].append(refs)
    owners = set()
    for run_id, refs_list in by_run.items():
        bodies = blobs.load_for(conn, [{"request_refs": r} for r in refs_list], messages=False)
        found: set[str] = set()
        for refs in refs_list:
            blobs.reached(refs, bodies, found)
        if sha in found:
            owners.add(run_id)
    return owners
