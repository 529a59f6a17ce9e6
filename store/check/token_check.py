"""``escrow verify``'s token check: a run whose recorded ids contradict its
own figures (prompt ids against ``usage.prompt_tokens``, sampled ids against
``usage.completion_tokens``, one logprob per sampled token, no negative id)
fails, as a changed row would. The check is the drift check's
(``orchestrator.token_drift.length_problems``); this reads the rows for it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from sqlalchemy import Connection, select

from orchestrator.envelope import Envelope
from orchestrator.token_drift import Decode, RunTokens, call_ids, check_envelopes, length_problems
from store.chain import ChainRow
from store.schema.tables import ModelResponse, table_of
from store.write.token_ids import envelopes_in_order, expand_rows

RESPONSES = ModelResponse.__tablename__


def problems(rows: Iterable[ChainRow]) -> dict[str, tuple[str, str]]:
    """Per run: (response row id, the first contradiction found)."""
    by_run: dict[str, list[dict]] = defaultdict(list)
    for item in rows:
        if item.table == RESPONSES and "token_ids" in str(item.row.get("envelope_json") or ""):
            by_run[str(item.row.get("run_id"))].append(item.row)
    found: dict[str, tuple[str, str]] = {}
    for run_id, responses in by_run.items():
        for row in expand_rows(responses):
            try:
                envelope = Envelope.model_validate_json(row["envelope_json"])
            except ValueError:
                continue  # an envelope that does not parse is the chain's and the cells' finding
            listed = length_problems(call_ids(str(row["call_id"]), row.get("turn"), envelope))
            if listed:
                found[run_id] = (str(row["id"]), f"recorded token ids contradict the call's figures: {listed[0]}")
                break
    return found


def run_tokens(conn: Connection, run_id: str, *, decode: Decode | None = None,
               vocab_size: int | None = None) -> RunTokens:
    """The drift check of one run from its response rows alone (the viewer's
    run page reads turns a page at a time; this reads no request text)."""
    t = table_of(ModelResponse)
    rows = [dict(r) for r in conn.execute(
        select(t.c.id, t.c.call_id, t.c.turn, t.c.seq, t.c.envelope_json).where(t.c.run_id == run_id)
        .order_by(t.c.seq)).mappings()]
    calls = [(str(row["call_id"]), row["turn"], envelope)
             for row, envelope in zip(rows, envelopes_in_order(r["envelope_json"] for r in rows), strict=True)
             if envelope is not None]  # verify reports an envelope that does not parse
    return check_envelopes(run_id, calls, decode=decode, vocab_size=vocab_size)
