"""The per-run hash chain, as pure functions.

h_0 = sha256(canonical({"table": "runs", "row": genesis columns}))
h_i = sha256(h_{i-1} || canonical({"table": T, "row": R}))

where h is lower-case hex, ``||`` is byte concatenation, and R is the row
keyed by column name with ``chain_hash`` and NULL columns left out (so a
nullable column added by a later migration keeps old chains valid). Rows are
chained in ``seq`` order across all chained tables; the run row holds the head
(``chain_seq``, ``chain_head``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from orchestrator.canonical import canonical_json, sha256_hex
from orchestrator.contract import Frozen

GENESIS_COLUMNS: tuple[str, ...] = (
    "id", "created_at", "task", "repo", "mode", "gen_ai.request.model", "config_json", "policy_json",
    "parent_run_id", "forked_at_turn", "escrow_version",
)


def hashed_form(table: str, row: Mapping[str, Any]) -> str:
    kept = {k: v for k, v in row.items() if k != "chain_hash" and v is not None}
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
        where = {"seq": at.seq, "table": at.table, "row_id": str(at.row.get("id"))} if at else {}
        return ChainCheck(run_id=run_id, ok=False, rows=len(ordered), head=head, problem=problem, **where)

    for expected_seq, item in enumerate(ordered, start=1):
        if item.seq != expected_seq:
            what = "duplicated" if item.seq < expected_seq else f"missing (next found is {item.seq})"
            return broken(f"row seq {expected_seq} is {what}", item)
        if str(item.row.get("run_id")) != run_id:
            return broken("row belongs to another run", item)
        head = link(head, item.table, item.row)
        if item.row.get("chain_hash") != head:
            return broken(f"hash mismatch at seq {item.seq} ({item.table} {item.row.get('id')})", item)
    if run_row.get("chain_seq") != len(ordered):
        return broken(f"run records {run_row.get('chain_seq')} chained rows but {len(ordered)} exist")
    if run_row.get("chain_head") != head:
        return broken("run head does not match the last link")
    return ChainCheck(run_id=run_id, ok=True, rows=len(ordered), head=head)
