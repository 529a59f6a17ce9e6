"""The per-run hash chain, as pure functions.

h_0 = sha256(canonical({"table": "runs", "row": genesis columns}))
h_i = sha256(h_{i-1} || canonical({"table": T, "row": R}))

where h is lower-case hex, ``||`` is byte concatenation, and R is the row
keyed by column name with ``chain_hash``, NULL columns (so a nullable column
added by a later migration keeps old chains valid) and ``COPIES`` left out. Rows are
chained in ``seq`` order across all chained tables; the run row holds the head
(``chain_seq``, ``chain_head``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.canonical import canonical_json, sha256_hex
from orchestrator.contract import Frozen

GENESIS_COLUMNS: tuple[str, ...] = (
    "id", "created_at", "task", "repo", "mode", "gen_ai.request.model", "config_json", "policy_json",
    "parent_run_id", "forked_at_turn", "escrow_version",
)
GENESIS_EVENT = "genesis"
"""The event ``start_run`` chains first (seq 1): the genesis columns as data."""
VERDICT_EVENT = "verdict"
"""The event ``finish_run`` chains last: the run's verdict and its detail."""


# Columns copied from another chained row for reports (schema 7): not hashed,
# so rows written before the copy existed keep their links; verify checks
# each copy against the row it was copied from instead (store.write.model_column).
COPIES: dict[str, frozenset[str]] = {
    "model_responses": frozenset({"gen_ai.request.model"}),
    "call_attempts": frozenset({"gen_ai.request.model"}),
}


def hashed_form(table: str, row: Mapping[str, Any]) -> str:
    copies = COPIES.get(table, frozenset())
    kept = {k: v for k, v in row.items() if k != "chain_hash" and v is not None and k not in copies}
    return canonical_json({"table": table, "row": kept})


def genesis(run_row: Mapping[str, Any]) -> str:
    return sha256_hex(hashed_form("runs", {k: run_row.get(k) for k in GENESIS_COLUMNS}))


def link(prev: str, table: str, row: Mapping[str, Any]) -> str:
    return sha256_hex(prev.encode("ascii") + hashed_form(table, row).encode("utf-8"))


class ChainRow(Frozen):
    """One chained row as read back: table name and its columns."""

    table: str
    row: dict[str, Any]

    @property
    def seq(self) -> int:
        return int(self.row["seq"])


class ChainCheck(Frozen):
    """The outcome of checking one run's chain. ``problem`` names the first
    broken link; ``seq``/``table``/``row_id`` locate it when it is a row."""

    run_id: str
    ok: bool
    rows: int
    head: str
    problem: str | None = None
    seq: int | None = None
    table: str | None = None
    row_id: str | None = None


def check_chain(run_row: Mapping[str, Any], rows: Iterable[ChainRow]) -> ChainCheck:
    """Recompute the chain of one run and compare it link by link."""
    run_id = str(run_row["id"])
    ordered = sorted(rows, key=lambda r: r.seq)
    head = genesis(run_row)

    def broken(problem: str, at: ChainRow | None = None) -> ChainCheck:
        where: dict[str, Any] = {"seq": at.seq, "table": at.table, "row_id": str(at.row.get("id"))} if at else {}
        return ChainCheck(run_id=run_id, ok=False, rows=len(ordered), head=head, problem=problem, **where)

    for expected_seq, item in enumerate(ordered, start=1):
        if item.seq != expected_seq:
            what = "duplicated" if item.seq < expected_seq else f"missing (next found is {item.seq})"
            return broken(f"row seq {expected_seq} is {what}", item)
        if str(item.row.get("run_id")) != run_id:
            return broken("row belongs to another run", item)
        head = link(head, item.table, item.row)
        if item.row.get("chain_hash") != head:
            problem = f"hash mismatch at seq {item.seq} ({item.table} {item.row.get('id')})"
            if item.seq == 1 and (why := genesis_problem(run_row, item)):
                return broken(why).model_copy(update={"table": "runs", "row_id": run_id})
            if item.seq == 1:
                problem += ": this row, or an immutable column of the run row, was altered"
            return broken(problem, item)
    recorded = run_row.get("chain_seq")
    if isinstance(recorded, int) and recorded > len(ordered):
        missing = list(range(len(ordered) + 1, recorded + 1))
        shown = ", ".join(map(str, missing[:5])) + (" ..." if len(missing) > 5 else "")
        return broken(f"chained row seq {shown} is missing: the run records {recorded} chained rows, "
                      f"{len(ordered)} exist")
    if recorded != len(ordered):
        return broken(f"run records {recorded} chained rows but {len(ordered)} exist")
    if run_row.get("chain_head") != head:
        return broken("run head does not match the last link")
    return ChainCheck(run_id=run_id, ok=True, rows=len(ordered), head=head)


def genesis_problem(run_row: Mapping[str, Any], first: ChainRow) -> str | None:
    """When seq 1 is an intact genesis event (its hash links from the genesis
    it records), the run row's columns that differ from it were altered."""
    if first.table != "events" or first.row.get("kind") != GENESIS_EVENT:
        return None
    try:
        recorded = json.loads(first.row.get("data_json") or "")
    except (TypeError, ValueError):
        return None
    if not isinstance(recorded, dict) or link(genesis(recorded), first.table, first.row) != first.row.get("chain_hash"):
        return None
    changed = [c for c in GENESIS_COLUMNS if run_row.get(c) != recorded.get(c)]
    if not changed:
        return None
    column = changed[0]
    return (f"run row column {column} was altered: it is {_clip(run_row.get(column))}, the chained genesis "
                f"record (seq 1) says {_clip(recorded.get(column))}"
                + (f" (also altered: {', '.join(changed[1:])})" if len(changed) > 1 else ""))


def _clip(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
