"""What the run page shows, built from a Trajectory. Pure: store views in,
plain frozen records (``shown``) out; the templates only lay them out.

JSON columns are read with ``json.loads`` rather than through the pydantic
models: a 200-turn run carries every request's full history, and the page
needs only a few fields of each.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Mapping
from typing import Any

from cli.view.shown import CallShown, CandidateShown, EventShown, MessageShown, RunShown, TurnShown
from orchestrator.envelope import reported
from orchestrator.trajectory import CallView, CandidateView, EventView, ToolExecutionView, Trajectory, TurnRecord
from policies import Flag
from store.chain import GENESIS_EVENT


def _message(raw: dict[str, Any]) -> MessageShown:
    content = raw.get("content")
    if not isinstance(content, str):
        content = json.dumps(content, ensure_ascii=False) if content is not None else ""
    calls = tuple(f"{c.get('name')}({c.get('arguments', '')})" for c in raw.get("tool_calls") or ())
    return MessageShown(
        role=str(raw.get("role")), content=content, tool_calls=calls, tool_call_id=raw.get("tool_call_id")
    )


def _call(call: CallView) -> CallShown:
    resp = call.response
    if resp is None:
        return CallShown(
            id=call.id,
            seq=call.seq,
            response_seq=None,
            status="NO RESPONSE",
            finish_reason=None,
            text="",
            reasoning=None,
            reasoning_tokens=None,
            refusal=None,
            tool_calls=(),
            error="no response was recorded (in flight when the run stopped)",
            input_tokens=None,
            cached_tokens=None,
            prefilled_tokens=None,
            output_tokens=None,
            cost_usd=None,
            ttft_s=None,
            decode_s=None,
            total_s=None,
            attempts=0,
            retry_of=call.attempt_of,
        )
    envelope = json.loads(resp.envelope_json)
    payload = envelope.get("payload") or {}
    error = envelope.get("error") or {}
    cause = (
        f"{error.get('kind', resp.error_type or '')}: {error.get('message', resp.error_message or '')}"
        if error or resp.error_message
        else None
    )
    cached = reported(resp.cached_input_tokens, resp.cached_input_tokens_source)
    return CallShown(
        id=call.id,
        seq=call.seq,
        response_seq=resp.seq,
        status=resp.status,
        finish_reason=envelope.get("finish_reason"),
        text=payload.get("text") or "",
        reasoning=resp.reasoning or payload.get("reasoning") or payload.get("reasoning_content"),
        reasoning_tokens=resp.reasoning_tokens,
        refusal=payload.get("refusal"),
        tool_calls=tuple(
            (str(c.get("id")), str(c.get("name")), str(c.get("arguments"))) for c in payload.get("tool_calls") or ()
        ),
        error=cause,
        input_tokens=reported(resp.input_tokens, resp.input_tokens_source),
        cached_tokens=cached,
        prefilled_tokens=None if cached is None else max(0, resp.input_tokens - cached),
        output_tokens=reported(resp.output_tokens, resp.output_tokens_source),
        cost_usd=resp.cost_usd,
        ttft_s=resp.ttft_s,
        decode_s=resp.decode_s,
        # 0: no time was recorded (an imported call whose source gave none; a real call takes time).
        total_s=resp.total_s or None,
        attempts=resp.n_attempts,
        retry_of=call.attempt_of,
    )


def _imported_reasoning(shown: CallShown, record: TurnRecord) -> CallShown:
    """An imported call's reasoning is its turn's event (its envelope has none)."""
    return shown if shown.reasoning else dataclasses.replace(shown, reasoning=record.source_reasoning() or None)


def edit_diff(tool: str | None, arguments: str) -> str | None:
    """The change an edit_file or write_file call asked for, as a unified diff."""
    if tool not in ("edit_file", "write_file"):
        return None
    try:
        args = json.loads(arguments)
    except ValueError:
        return None
    if not isinstance(args, dict) or not isinstance(args.get("path"), str):
        return None
    path = args["path"]
    if tool == "edit_file" and isinstance(args.get("old"), str) and isinstance(args.get("new"), str):
        old, new, before = args["old"], args["new"], f"a/{path}"
    elif tool == "write_file" and isinstance(args.get("content"), str):
        old, new, before = "", args["content"], f"a/{path} (previous content not recorded)"
    else:
        return None
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), before, f"b/{path}", n=2)
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _arguments(candidate: CandidateView) -> str:
    try:
        raw = json.loads(candidate.tool_call_json)
    except ValueError:
        return candidate.tool_call_json
    if isinstance(raw, dict):
        args = raw.get("arguments", raw)
        return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return candidate.tool_call_json


def _candidate(candidate: CandidateView, execution: ToolExecutionView | None) -> CandidateShown:
    arguments = _arguments(candidate)
    return CandidateShown(
        index=candidate.candidate_index,
        seq=candidate.seq,
        tool_name=candidate.tool_name or "?",
        arguments=arguments,
        state=candidate.state,
        transitions=tuple(
            (t.seq, t.from_state or "-", t.to_state, t.layer or "", t.reason) for t in candidate.transitions
        ),
        execution=execution,
        edit_diff=edit_diff(candidate.tool_name, arguments),
    )


def _event(event: EventView) -> EventShown:
    data = event.data
    if event.kind == "compaction":
        summary = (
            f"{data.get('strategy')}: {data.get('messages_changed')} messages from "
            f"#{data.get('first_changed_message')}, "
            f"~{data.get('tokens_before')} -> ~{data.get('tokens_after')} tokens"
        )
    elif event.kind == "route":
        summary = f"{data.get('status')} -> {data.get('action')}"
    else:
        summary = ", ".join(f"{k}={v}" for k, v in data.items() if isinstance(v, (str, int, float)) and k != "text")[
            :200
        ]
    return EventShown(
        seq=event.seq, kind=event.kind, data=json.dumps(data, indent=1, ensure_ascii=False), summary=summary
    )


def _turn(
    record: TurnRecord, new: tuple[MessageShown, ...], tail: MessageShown | None = None, opening: bool = False
) -> TurnShown:
    executions = {e.candidate_id: e for e in record.tool_executions}
    calls = tuple(_imported_reasoning(_call(c), record) if c.imported else _call(c) for c in record.calls)
    candidates = tuple(_candidate(c, executions.get(c.id)) for c in record.candidates)
    events = tuple(_event(e) for e in record.events)
    return TurnShown(
        turn=record.turn, committed_seq=record.committed.seq if record.committed else None, new_messages=new, tail=tail,
        calls=calls, candidates=candidates, events=events, opening=opening,
    )


def _opening(record: TurnRecord) -> tuple[MessageShown, ...]:
    """All messages of the first request (system prompt, task, tail)."""
    main = next((c for c in record.calls if c.attempt_of is None), None)
    if main is None:
        return ()
    return tuple(_message(m) for m in json.loads(main.request_json).get("messages") or ())


def _tail(record: TurnRecord, new: tuple[MessageShown, ...], last_messages: Mapping[str, str]) -> MessageShown | None:
    """The request's last message, unless it is the newest history message
    (a run without a tail) or the turn shows the whole request anyway."""
    main = next((c for c in record.calls if c.attempt_of is None), None)
    raw = last_messages.get(main.id) if main is not None else None
    if raw is None:
        return None
    try:
        last = _message(json.loads(raw))
    except (ValueError, AttributeError):
        return None
    return None if new and (new[-1].role, new[-1].content) == (last.role, last.content) else last


def run_shown(
    trajectory: Trajectory,
    appended_before: str | None = None,
    last_messages: Mapping[str, str] | None = None,
    appended_before_each: Mapping[int, str | None] | None = None,
) -> RunShown:
    """A request's new messages are the first request's own, then what the
    previous turn appended to the history (its committed messages). Reading
    those rather than diffing every request keeps a long run's page linear:
    each request carries the whole history. ``appended_before`` is what the
    turn before the first shown one appended, when the page starts later;
    ``last_messages`` each request's last message, to show its volatile tail;
    ``appended_before_each``, for turns that do not follow one another (a search's), what
    the turn before each appended (None before the first turn)."""
    turns = []
    new: tuple[MessageShown, ...] | None = None
    if appended_before is not None:
        new = tuple(_message(m) for m in json.loads(appended_before))
    for record in trajectory.turns:
        if appended_before_each is not None:
            raw = appended_before_each.get(record.turn, "[]")
            new = None if raw is None else tuple(_message(m) for m in json.loads(raw))
        opening = new is None and bool(record.calls)
        if opening:
            new = _opening(record)
        tail = None if opening or not last_messages else _tail(record, new or (), last_messages)
        turns.append(_turn(record, new or (), tail, opening))
        appended = json.loads(record.committed.messages_json) if record.committed else []
        if new is not None:
            new = tuple(_message(m) for m in appended)
    patch = next((e for e in reversed(trajectory.run_events) if e.kind == "patch"), None)
    patch_data = patch.data if patch else {}
    return RunShown(
        trajectory=trajectory,
        turns=tuple(turns),
        run_events=tuple(_event(e) for e in trajectory.run_events if e.kind not in ("patch", GENESIS_EVENT)),
        patch=patch_data.get("text") if patch else None,
        patch_files=tuple(patch_data.get("files") or ()),
        patch_flags=tuple(Flag.from_recorded(f) for f in patch_data.get("flagged") or ()),
    )


def matching(turns: tuple[TurnShown, ...], query: str | None) -> tuple[TurnShown, ...]:
    """The turns whose text contains ``query`` (case-insensitive); all when empty."""
    if not query:
        return turns
    needle = query.lower()
    return tuple(t for t in turns if needle in t.haystack)
