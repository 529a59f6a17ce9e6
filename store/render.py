"""Plain-text and JSON renderings of store views for the CLI. Pure: views in,
strings or JSON-ready dicts out. Recorded text (tasks, details, observations,
events) is shown through ``one_line``, which escapes terminal controls."""

from __future__ import annotations

import json

from orchestrator.canonical import text_bytes
from orchestrator.envelope import reported
from orchestrator.source_figures import IMPORT_EVENT, counted_run_level
from orchestrator.trajectory import ResponseView, Trajectory, TurnRecord
from store.chain import GENESIS_EVENT, ChainCheck
from store.liveness import CRASHED, RUNNING
from store.run_list import clip, when


def _count(value: int, source: str) -> str:
    shown = reported(value, source)
    return "absent" if shown is None else str(shown)


def trajectory_text(trajectory: Trajectory) -> str:
    lines = trajectory_header(trajectory)
    for record in trajectory.turns:
        lines += turn_lines(record)
    return "\n".join(lines)


def trajectory_header(trajectory: Trajectory) -> list[str]:
    r = trajectory.run
    lines = [
        f"run {r.id}  ({r.mode}, {r.status}{', ' + r.verdict if r.verdict else ''})",
        f"  task:    {clip(r.task, 100)}",
        f"  repo:    {clip(r.repo, 200)}",
        f"  model:   {clip(r.request_model, 100)}",
        f"  started: {when(r.created_at)}   finished: {when(r.finished_at)}",
    ]
    if r.parent_run_id:
        lines.append(
            f"  forked from {r.parent_run_id} at turn {r.forked_at_turn}" if r.forked_at_turn is not None
            else f"  {r.mode} of {r.parent_run_id}"
        )
    if r.verdict_detail:
        lines.append(f"  detail:  {clip(r.verdict_detail, 100)}")
    if r.status == RUNNING:
        lines.append("  no verdict recorded yet: the run is still running (its lease is being renewed)")
    elif r.status == CRASHED:
        lines.append(f"  crashed: no verdict recorded, and the process that ran it is gone (its lease lapsed); "
                     f"last alive {when(r.last_alive_at)}")
    for event in trajectory.run_events:
        if event.kind == GENESIS_EVENT:
            continue  # the run row's own columns, chained for verify
        lines.append(f"  event {clip(event.kind, 40)}: {clip(event.data_json, 90)}")
        counted = counted_run_level(event.data_json) if event.kind == IMPORT_EVENT else None
        if counted:
            figures = ", ".join(f"{name} {value}" for name, value in counted.items() if value is not None)
            lines.append(f"  run-level (the source's own, given for no call; counted in its totals): {figures}")
    return lines


IN_FLIGHT_NO_RESPONSE = (
    "  the run stopped while this call was in flight: its request was committed before the call was made, "
    "no response was recorded")
IN_FLIGHT_AFTER_RESPONSE = (
    "  the run stopped during this turn, after the model answered: the request and the envelope are each "
    "committed the moment they happen; the turn's candidates, tool results and events are committed with "
    "the turn, so none of them were (a tool call in progress when the run died leaves no trace but the envelope)")


def in_flight_lines(record: TurnRecord) -> list[str]:
    """What a turn the run died in has recorded, and why the rest is missing."""
    if not record.calls or record.committed:
        return []
    answered = [c.response for c in record.calls if c.response is not None]
    lines = [IN_FLIGHT_AFTER_RESPONSE if answered else IN_FLIGHT_NO_RESPONSE]
    for response in answered:
        for index, proposed in enumerate(response.envelope().payload.tool_calls):
            lines.append(f"  proposed tool call {index} (never committed): {clip(proposed.name, 60)} "
                         f"{clip(proposed.arguments, 70)}")
    return lines


def turn_lines(record: TurnRecord) -> list[str]:
    state = "committed" if record.committed else "not committed (in flight when the run stopped)"
    if not record.calls and not record.committed:
        state = "events only"
    lines = ["", f"turn {record.turn}: {state}", *in_flight_lines(record)]
    for call in record.calls:
        resp = call.response
        limit = "absent (the source gives none)" if "max_tokens" in call.absent_fields else call.max_tokens
        lines.append(f"  call {call.id[:12]} request sha256 {call.request_sha256[:16]}  max_tokens {limit}")
        if resp is None:
            lines.append("    no response recorded")
            continue
        cost = "" if resp.cost_usd is None else f"  ${resp.cost_usd:.5f}"
        lines.append(
            f"    {resp.status} finish={json.loads(resp.finish_reasons)[0] if resp.finish_reasons else '-'}"
            f"  tokens in {_count(resp.input_tokens, resp.input_tokens_source)} (cached "
            f"{_count(resp.cached_input_tokens, resp.cached_input_tokens_source)}) out "
            f"{_count(resp.output_tokens, resp.output_tokens_source)}"
            f"  ttft {_secs(resp.ttft_s)} total {_secs(resp.total_s)}  attempts {resp.n_attempts}{cost}"
        )
        if resp.error_message:
            lines.append(f"    error {resp.error_type}: {clip(resp.error_message, 90)}")
        if resp.reasoning:
            lines.append(f"    reasoning {reasoning_figures(resp)}: {clip(resp.reasoning, 200)}")
    executions = {e.candidate_id: e for e in record.tool_executions}
    for cand in record.candidates:
        run = executions.get(cand.id)
        path = " -> ".join(t.to_state for t in cand.transitions) or "no transitions"
        if run is not None and run.imported:
            path = "executed by the source agent (imported: no escrow, no ACL decision made)"
        lines.append(f"  candidate {cand.candidate_index} {clip(cand.tool_name or '?', 60)}: {path}")
        if run is not None and run.imported:
            lines.append(f"    exit {run.exit_code if run.exit_code is not None else '-'}  {_secs(run.duration_s)}")
            lines.append(f"    output: {clip(run.observation, 90)}")
        elif run is not None:
            lines.append(
                f"    {run.decision or '-'} by {clip(run.rule or '-', 80)}  exit "
                f"{run.exit_code if run.exit_code is not None else '-'}"
                f"  {_secs(run.duration_s)}  stdout {run.stdout_bytes} B{' (capped)' if run.stdout_truncated else ''}"
            )
            lines.append(f"    observation: {clip(run.observation, 90)}")
    for event in record.events:
        lines.append(f"  event {clip(event.kind, 40)}: {clip(event.data_json, 90)}")
    return lines


def reasoning_figures(resp: ResponseView) -> str:
    """Size of the reasoning: its bytes and, when the server counted them,
    its tokens and their convention."""
    size = f"{len(text_bytes(resp.reasoning)) if resp.reasoning else 0} B"
    if resp.reasoning_tokens is None:
        return f"({size})"
    return f"({size}, {resp.reasoning_tokens} tokens, {resp.reasoning_convention})"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def check_line(check: ChainCheck) -> str:
    if check.ok:
        return f"ok      {check.run_id}  {check.rows} rows  head {check.head[:16]}"
    return f"BROKEN  {check.run_id}  {check.problem}"
