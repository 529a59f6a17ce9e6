"""The text of a run's requests, rebuilt from their stored message hashes:
whole, or only what each call appended (its last messages), for the run's
page in ``escrow view`` (``store.read.turn_browse``) and its search.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import (
    Connection,
    Table,
    select,
)

from store.schema.tables import (
    ModelCall,
    table_of,
)
from store.write import blobs

CALLS: Table = table_of(ModelCall)


def last_messages(conn: Connection, call_rows: list[dict[str, Any]]) -> dict[str, str]:
    """Each request's last message (JSON), by call id. A request stored by
    reference (store.write.blobs) is not reassembled: its message-list nodes lead
    to its last message's blob, the only one read; reassembling every
    request would re-encode the whole history once per turn."""
    out: dict[str, str] = {}
    referenced = [r for r in call_rows if r.get("request_refs")]
    bodies: dict[str, str] = {}
    # Each request names its own node, which usually holds its last message;
    # parents are read only for nodes that added none (not the whole chain).
    pending = {r["id"]: blobs.refs_of(r["request_refs"]).get(blobs.MESSAGES) for r in referenced}
    wanted: dict[str, str] = {}
    while pending:
        blobs.fetch(conn, [n for n in pending.values() if n], bodies)
        step: dict[str, str | None] = {}
        for call_id, node in pending.items():
            found = _last_hash(node, bodies)
            if isinstance(found, str):
                wanted[call_id] = found
            elif isinstance(found, tuple) and found[0] not in bodies:
                step[call_id] = found[0]
        pending = step
    blobs.fetch(conn, wanted.values(), bodies)
    for call_id, sha in wanted.items():
        try:
            out[call_id] = json.dumps(json.loads(bodies[sha]))
        except (KeyError, ValueError):  # a missing or damaged blob: no tail (verify names it)
            continue
    for row in call_rows:
        if not row.get("request_refs") and row.get("request_json"):
            try:
                out[row["id"]] = json.dumps(json.loads(row["request_json"])["messages"][-1])
            except (ValueError, KeyError, IndexError, TypeError):  # not a request (an edited row): no tail
                continue
    return out


def _last_hash(node: str | None, bodies: dict[str, str]) -> str | tuple[str] | None:
    """The hash of the last message of a message-list node's list; (parent,)
    when the walk needs a node not read yet; None when there is none."""
    seen: set[str] = set()
    while node is not None and node not in seen:
        seen.add(node)
        if node not in bodies:
            return (node,)
        try:
            entry = json.loads(bodies[node])
            hashes, parent = entry[blobs.MESSAGES], entry["parent"]
        except (KeyError, ValueError, TypeError):
            return None
        if hashes:
            return hashes[-1] if isinstance(hashes[-1], str) else None
        node = parent if isinstance(parent, str) else None
    return None


def request_outlines(conn: Connection, pairs: list[tuple[str, str]]) -> dict[str, str]:
    """For pairs of calls whose requests differ, each request as JSON with
    only what locates their first difference spelled out: the request's own
    fields, its tools (by hash, unless the two differ), its messages by hash
    except the first one where the two differ. Compared field by field, two
    outlines differ first where the whole requests do, without reading or
    re-encoding either history. A request stored whole is returned whole."""
    ids = sorted({i for pair in pairs for i in pair})
    rows = {r["id"]: dict(r) for r in conn.execute(select(CALLS).where(CALLS.c.id.in_(ids))).mappings()} if ids else {}
    whole = [r for r in rows.values() if not r.get("request_refs")]
    out = request_texts(conn, whole) if whole else {}
    bodies = blobs.load_for(conn, [r for r in rows.values() if r.get("request_refs")], messages=False)
    lists: dict[str, list[str]] = {}

    def message_hashes(node: str) -> list[str]:
        """A node's message hashes, each node's list made once from its
        parent's (blobs.message_hashes walks every request's whole chain)."""
        chain = []
        while node not in lists:
            chain.append(node)
            entry = json.loads(bodies[node])
            if entry["parent"] is None:
                lists[node] = list(entry[blobs.MESSAGES])
                chain.pop()
                break
            node = entry["parent"]
            if len(chain) > len(bodies):
                raise ValueError("a message-list node is its own ancestor")
        for current in reversed(chain):
            entry = json.loads(bodies[current])
            lists[current] = lists[entry["parent"]] + list(entry[blobs.MESSAGES])
        return lists[chain[0]] if chain else lists[node]

    skeletons: dict[str, tuple[dict[str, Any], str | None, list[str]]] = {}
    for call_id, row in rows.items():
        if call_id in out:
            continue
        try:
            refs = blobs.refs_of(row["request_refs"])
            hashes = message_hashes(refs[blobs.MESSAGES]) if blobs.MESSAGES in refs else []
            skeletons[call_id] = (json.loads(row["request_body"]), refs.get(blobs.TOOLS), hashes)
        except (KeyError, ValueError, TypeError):  # damaged: compared as whole text (verify names the damage)
            out.update(request_texts(conn, [row]))
    # Messages before the first differing one are equal on both sides (the
    # same placeholder keeps their positions); those after it cannot come
    # first in the comparison and are left out.
    outlines: dict[str, tuple[dict[str, Any], str | None, list[str], int]] = {}
    for a, b in pairs:
        if a not in skeletons or b not in skeletons:
            continue
        (body_a, tools_a, msgs_a), (body_b, tools_b, msgs_b) = skeletons[a], skeletons[b]
        first = next(
            (i for i, (x, y) in enumerate(zip(msgs_a, msgs_b, strict=False)) if x != y), min(len(msgs_a), len(msgs_b))
        )
        for call_id, body, tools, msgs in ((a, body_a, tools_a, msgs_a), (b, body_b, tools_b, msgs_b)):
            outlines[call_id] = (body, tools if tools_a != tools_b else None, msgs[first:first + 1], first)
            if tools is not None and tools_a == tools_b:
                outlines[call_id] = (body, "=", msgs[first:first + 1], first)
    blobs.fetch(
        conn, [s for _, tools, spelled, _ in outlines.values() for s in (*spelled, tools) if s and s != "="], bodies
    )
    for call_id, (body, tools, spelled, first) in outlines.items():
        outline = dict(body)
        if tools is not None:
            outline[blobs.TOOLS] = json.loads(bodies[tools]) if tools in bodies else tools
        outline[blobs.MESSAGES] = ["="] * first + [json.loads(bodies[h]) if h in bodies else h for h in spelled]
        out[call_id] = json.dumps(outline)
    return out


def requests(conn: Connection, call_ids: list[str]) -> dict[str, str]:
    """The recorded request text of the given calls, by call id."""
    if not call_ids:
        return {}
    return request_texts(conn, [dict(r._mapping) for r in conn.execute(select(CALLS).where(CALLS.c.id.in_(call_ids)))])


def request_texts(conn: Connection, call_rows: list[dict[str, Any]]) -> dict[str, str]:
    """Request text by call id, reassembled from its blobs where stored by reference."""
    return {row["id"]: row["request_json"] for row in blobs.expand(conn, call_rows)}
