"""Content-addressed request parts (schema 4): each distinct message, tools
list and message-list node is stored once in ``blobs``, keyed by the sha256
of its body, and a request row keeps only the rest of the request and the
hashes it references.

A request's messages are a linked list of nodes, one per request: a node's
body is ``{"messages": [hashes added], "parent": node or null}``, so a run
whose history grows by k messages a turn stores k hashes a turn, not the
whole history again. Reassembly is ``canonical_json`` of the request with
the referenced keys put back, which gives the recorded bytes exactly
(``request_sha256`` is unchanged); docs/SCHEMA.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection, Table, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from orchestrator.canonical import canonical_json, sha256_hex
from orchestrator.exit_codes import ExitCode
from store.errors import StoreError
from store.schema.tables import Blob, table_of

BLOBS: Table = table_of(Blob)
MESSAGES, TOOLS = "messages", "tools"
HASHED_AS_TEXT = "request_json"
"""``request_hashed_as`` of a row converted by the migration: its chain link
was computed over the whole ``request_json`` text, which is reassembled to
check it."""
REF_COLUMNS = ("request_body", "request_refs", "request_hashed_as")
BATCH = 500


class BlobMissing(StoreError):
    """A request refers to a blob the store does not hold, or to a damaged one."""

    exit_code = ExitCode.FINDING


class History(NamedTuple):
    """The message list of a run's last request: its node and message hashes."""

    node: str
    hashes: tuple[str, ...]


class Split(NamedTuple):
    body: str
    refs: str
    blobs: dict[str, str]
    history: History | None


def split(request: Mapping[str, Any], previous: History | None = None) -> Split | None:
    """The request without its messages and tools, the references to them and
    the new blobs; None when the request does not have the expected shape
    (it is then kept whole)."""
    messages, tools = request.get(MESSAGES), request.get(TOOLS)
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return None
    rest = {k: v for k, v in request.items() if k not in (MESSAGES, TOOLS)}
    texts = [canonical_json(m) for m in messages]
    hashes = tuple(sha256_hex(t) for t in texts)
    blobs: dict[str, str] = {}
    if previous is not None and hashes == previous.hashes:
        history = previous
    else:
        shared = len(previous.hashes) if previous and hashes[: len(previous.hashes)] == previous.hashes else 0
        node = canonical_json(
            {"messages": list(hashes[shared:]), "parent": previous.node if previous and shared else None}
        )
        history = History(sha256_hex(node), hashes)
        blobs[history.node] = node
        blobs.update(zip(hashes[shared:], texts[shared:], strict=True))
    refs = {MESSAGES: history.node}
    if tools is not None:
        tools_text = canonical_json(tools)
        refs[TOOLS] = sha256_hex(tools_text)
        blobs[refs[TOOLS]] = tools_text
    return Split(canonical_json(rest), canonical_json(refs), blobs, history)


def message_hashes(node: str, bodies: Mapping[str, str], parsed: dict[str, Any] | None = None) -> list[str]:
    parts = []
    seen: set[str] = set()
    current: str | None = node
    while current is not None:
        if current in seen:
            raise ValueError(f"message-list node {current} is its own ancestor")
        seen.add(current)
        entry = _load(current, bodies, parsed)
        parts.append(entry[MESSAGES])
        current = entry["parent"]
    return [h for part in reversed(parts) for h in part]


def assemble(body: str, refs: str, bodies: Mapping[str, str], parsed: dict[str, Any] | None = None) -> str:
    """The recorded request text, byte for byte. ``parsed`` caches parsed
    blobs across the requests of a run, which share most of them."""
    request = json.loads(body)
    for key, sha in json.loads(refs).items():
        if key == MESSAGES:
            request[key] = [_load(h, bodies, parsed) for h in message_hashes(sha, bodies, parsed)]
        else:
            request[key] = _load(sha, bodies, parsed)
    return canonical_json(request)


def _load(sha: str, bodies: Mapping[str, str], parsed: dict[str, Any] | None) -> Any:
    if parsed is None:
        return json.loads(_body(sha, bodies))
    if sha not in parsed:
        parsed[sha] = json.loads(_body(sha, bodies))
    return parsed[sha]


def _body(sha: str, bodies: Mapping[str, str]) -> str:
    try:
        return bodies[sha]
    except KeyError:
        raise BlobMissing(f"blob {sha} is missing from the store", sha256=sha) from None


def put(conn: Connection, blobs: Mapping[str, str]) -> None:
    """Insert blobs the store does not hold yet (one statement per batch)."""
    if not blobs:
        return
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    items = [{"sha256": k, "body": v} for k, v in blobs.items()]
    for start in range(0, len(items), BATCH):
        conn.execute(insert(BLOBS).on_conflict_do_nothing(index_elements=["sha256"]), items[start : start + BATCH])


def fetch(conn: Connection, shas: Iterable[str], into: dict[str, str]) -> None:
    wanted = sorted(set(shas) - into.keys())
    for start in range(0, len(wanted), BATCH):
        chunk = wanted[start : start + BATCH]
        into.update(
            (r.sha256, r.body)
            for r in conn.execute(select(BLOBS.c.sha256, BLOBS.c.body).where(BLOBS.c.sha256.in_(chunk)))
        )


def load_for(conn: Connection, call_rows: Iterable[Mapping[str, Any]], *, messages: bool = True) -> dict[str, str]:
    """Every blob the given request rows reach: nodes level by level (a run's
    nodes usually all come in the first round, as each request names its own),
    then the messages."""
    bodies: dict[str, str] = {}
    frontier: set[str] = set()
    for row in call_rows:
        frontier.update(refs_of(row.get("request_refs")).values())
    message_shas: set[str] = set()
    while frontier:
        fetch(conn, frontier, bodies)
        nodes = [_parsed(bodies[s]) for s in frontier if s in bodies]
        frontier = set()
        for node in nodes:
            if isinstance(node, dict) and isinstance(node.get(MESSAGES), list) and "parent" in node:
                message_shas.update(h for h in node[MESSAGES] if isinstance(h, str))
                if isinstance(node["parent"], str) and node["parent"] not in bodies:
                    frontier.add(node["parent"])
    if messages:
        fetch(conn, message_shas, bodies)
    return bodies


def request_text(row: Mapping[str, Any], bodies: Mapping[str, str], parsed: dict[str, Any] | None = None) -> str:
    if not row.get("request_refs"):
        return str(row["request_json"])
    return assemble(row["request_body"], row["request_refs"], bodies, parsed)


def expand(conn: Connection, call_rows: Sequence[Mapping[Any, Any]]) -> list[dict[str, Any]]:
    """Request rows with ``request_json`` reassembled from their blobs."""
    bodies = load_for(conn, call_rows)
    parsed: dict[str, Any] = {}
    out = []
    for row in call_rows:
        try:
            out.append({**row, "request_json": request_text(row, bodies, parsed)})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a damaged blob or reference
            raise BlobMissing(
                f"the request of call {row.get('id')} cannot be reassembled ({exc}); run `escrow verify --all`",
                call_id=row.get("id"),
            ) from None
    return out


def hashed_row(
    row: Mapping[str, Any], bodies: Mapping[str, str], parsed: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A request row as its chain link was computed: as stored, or, for a row
    converted by the migration, with its text reassembled in place of the
    reference columns."""
    if row.get("request_hashed_as") != HASHED_AS_TEXT:
        return dict(row)
    kept = {k: v for k, v in row.items() if k not in REF_COLUMNS}
    kept["request_json"] = request_text(row, bodies, parsed)
    return kept


def _parsed(body: str) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None  # a damaged blob: verify reports it by its hash


def reached(refs: str, bodies: Mapping[str, str], found: set[str] | None = None) -> set[str]:
    """Every blob one request refers to, directly or through its nodes; a
    damaged node ends the walk instead of failing it. Given ``found`` (the
    blobs other requests of the run reached), the walk stops at a node
    already in it and adds to it, so a whole run is walked in linear time."""
    found = set() if found is None else found
    for key, sha in refs_of(refs).items():
        current = sha if key == MESSAGES and sha not in found else None
        found.add(sha)
        while current is not None:
            found.add(current)
            node = _parsed(bodies.get(current, "null"))
            if not isinstance(node, dict) or not isinstance(node.get(MESSAGES), list):
                break
            found.update(h for h in node[MESSAGES] if isinstance(h, str))
            parent = node.get("parent")
            current = parent if isinstance(parent, str) and parent not in found else None
    return found


def refs_of(refs: str | None) -> dict[str, str]:
    """A row's references; empty when absent or damaged (the chain reports a
    damaged one)."""
    parsed = _parsed(refs) if refs else None
    if not isinstance(parsed, dict):
        return {}
    return {k: v for k, v in parsed.items() if isinstance(v, str)}
