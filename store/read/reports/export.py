"""Exports of recorded runs as JSON lines.

``messages-jsonl``: one chat example per run in TRL's conversational form
(``messages`` plus a ``tools`` column, tool-call arguments as objects),
rebuilt from what the store recorded: the messages of the run's last request,
then the messages its turns appended after that request. ``events-jsonl``:
every recorded row of a run, one per line, in chain order. ``atif`` and
``otel`` live in ``atif_export`` and ``otel_export``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection, select

from orchestrator.context.layout import TailFormat
from orchestrator.contract import Message
from orchestrator.errors import ReportError
from orchestrator.interop.records import IMPORT_MODE
from orchestrator.suspect import reward_fields
from orchestrator.trajectory import CallView, Trajectory
from store.schema.tables import Run, table_of

TAIL = TailFormat()
"""The tail every Escrow run's requests end with (``orchestrator.runspec``)."""

FORMATS = ("messages-jsonl", "events-jsonl", "atif", "otel", "rollout")
TRUNCATED_STATUSES = ("TRUNCATED",)


class ExportError(ReportError):
    """A run cannot be exported in the asked form."""


def tool_arguments(raw: str) -> tuple[dict[str, Any], bool]:
    """Arguments as an object, and whether the recorded text was one. Text that
    is not a JSON object is kept under ``raw`` (and the example flagged)."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"raw": raw}, False
    return (parsed, True) if isinstance(parsed, dict) else ({"raw": raw}, False)


def chat_message(message: Message, tool_names: dict[str, str], bad_arguments: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content or ""}
    if message.tool_calls:
        calls = []
        for call in message.tool_calls:
            arguments, ok = tool_arguments(call.arguments)
            if not ok:
                bad_arguments.append(call.id)
            tool_names[call.id] = call.name
            calls.append({"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}})
        out["tool_calls"] = calls
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
        out["name"] = message.name or tool_names.get(message.tool_call_id or "", "")
    return out


def last_call(trajectory: Trajectory) -> CallView | None:
    calls = [c for record in trajectory.turns for c in record.calls]
    return max(calls, key=lambda c: c.seq) if calls else None


def tokenizer_of(trajectory: Trajectory) -> tuple[str, str]:
    """(tokenizer id, where it was found): the context's recorded token counts,
    then the run config, else the model's own (the server's) tokenizer."""
    for record in trajectory.turns:
        for event in record.events:
            if event.kind == "token_counts" and isinstance(event.data.get("tokenizer"), str):
                return event.data["tokenizer"], "event"
    configured = trajectory.run.config.get("tokenizer")
    if isinstance(configured, str):
        return configured, "config"
    return f"model:{trajectory.run.request_model}", "model"


def reasoning_by_message(trajectory: Trajectory) -> dict[tuple[str, tuple[str, ...]], str]:
    """Recorded reasoning keyed by what its call released: (text, tool-call
    ids). History can be compacted, so assistant messages are matched to
    their call by content rather than by position."""
    found: dict[tuple[str, tuple[str, ...]], str] = {}
    for record in trajectory.turns:
        for call in record.calls:
            resp = call.response
            if resp is not None and resp.reasoning:
                payload = resp.envelope().payload
                found[(payload.text, tuple(c.id for c in payload.tool_calls))] = resp.reasoning
    return found


def conversation(trajectory: Trajectory, *, reasoning: bool = False) -> dict[str, Any]:
    """The run as one TRL conversational example with its provenance flags.
    With ``reasoning``, assistant messages carry the engine's separated
    reasoning as ``reasoning_content`` where one was recorded."""
    run = trajectory.run
    final = last_call(trajectory)
    if final is None:
        raise ExportError(f"run {run.id} recorded no model call; there is no conversation to export", run_id=run.id)
    request = final.request()
    messages = list(request.messages)
    # The status tail the loop appends to every request is the loop's words,
    # not the conversation's: a dataset of it would teach the model to expect it.
    if messages and run.mode != IMPORT_MODE and TAIL.is_tail(messages[-1]):
        messages.pop()
    for record in trajectory.turns:
        if record.committed is not None and final.turn is not None and record.turn >= final.turn:
            messages += record.committed.messages()
    tool_names: dict[str, str] = {}
    bad_arguments: list[str] = []
    chat = [chat_message(m, tool_names, bad_arguments) for m in messages]
    if reasoning:
        recorded = reasoning_by_message(trajectory)
        for message, out in zip(messages, chat, strict=True):
            key = (message.content or "", tuple(c.id for c in message.tool_calls))
            if message.role == "assistant" and key in recorded:
                out["reasoning_content"] = recorded[key]
    calls = [c for record in trajectory.turns for c in record.calls]
    executions = [e for record in trajectory.turns for e in record.tool_executions]
    tokenizer, tokenizer_source = tokenizer_of(trajectory)
    return {
        "messages": chat,
        "tools": [t.to_wire() for t in request.tools],
        "run_id": run.id,
        "model": request.model,
        "verdict": run.verdict,
        **run_reward(trajectory),
        "tokenizer": tokenizer,
        "tokenizer_source": tokenizer_source,
        "truncated_completions": sum(
            1 for c in calls if c.response is not None and c.response.status in TRUNCATED_STATUSES
        ),
        "capped_tool_outputs": sum(1 for e in executions if e.stdout_truncated or e.stderr_truncated),
        "compacted": any(e.kind == "compaction" for record in trajectory.turns for e in record.events),
        "unparsed_tool_arguments": len(bad_arguments),
    }


def event_lines(trajectory: Trajectory) -> Iterator[dict[str, Any]]:
    """Every recorded row of a run: the run, then its chained rows by seq."""
    yield {"type": "run", "run_id": trajectory.run.id, **trajectory.run.model_dump(mode="json")}
    rows: list[tuple[int, dict[str, Any]]] = []
    for event in trajectory.run_events:
        rows.append((event.seq, {"type": "event", **event.model_dump(mode="json")}))
    for record in trajectory.turns:
        if record.committed is not None:
            rows.append((record.committed.seq, {"type": "turn", **record.committed.model_dump(mode="json")}))
        for call in record.calls:
            body = call.model_dump(mode="json", exclude={"response", "attempts"})
            rows.append((call.seq, {"type": "model_call", **body}))
            if call.response is not None:
                response = call.response.model_dump(mode="json")
                response["attempts"] = [a.model_dump(mode="json") for a in call.attempts]
                rows.append((call.response.seq, {"type": "model_response", "call_id": call.id, **response}))
        for candidate in record.candidates:
            rows.append(
                (candidate.seq, {"type": "candidate", **candidate.model_dump(mode="json", exclude={"transitions"})})
            )
            for move in candidate.transitions:
                rows.append(
                    (move.seq, {"type": "transition", "candidate_id": candidate.id, **move.model_dump(mode="json")})
                )
        for execution in record.tool_executions:
            rows.append((execution.seq, {"type": "tool_execution", **execution.model_dump(mode="json")}))
        for event in record.events:
            rows.append((event.seq, {"type": "event", **event.model_dump(mode="json")}))
    for _, row in sorted(rows, key=lambda item: item[0]):
        yield row if "run_id" in row else {"run_id": trajectory.run.id, **row}


def run_reward(trajectory: Trajectory) -> dict[str, Any]:
    """The run's verdict as every export writes it as a reward
    (``orchestrator.suspect.reward_fields``), the reasons from its verdict event."""
    reasons: list[object] = []
    for event in trajectory.run_events:
        if event.kind == "verdict":
            found = event.data.get("suspect")
            reasons = list(found) if isinstance(found, list) else []
    return reward_fields(trajectory.run.verdict, reasons)


def is_verified_pass(trajectory: Trajectory) -> bool:
    return trajectory.run.verdict == "PASS"


def run_ids(conn: Connection, *, verdict: str | None = None) -> list[str]:
    """Ids of all runs (or those with ``verdict``), oldest first, via the runs indexes."""
    runs = table_of(Run)
    stmt = select(runs.c.id).order_by(runs.c.created_at, runs.c.id)
    if verdict is not None:
        stmt = stmt.where(runs.c.verdict == verdict)
    return [str(r) for r in conn.execute(stmt).scalars()]
