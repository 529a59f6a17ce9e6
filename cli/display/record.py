"""What ``escrow show`` prints of the record around the steps: the run's
header and events, and under ``--full`` each turn's call details. Plain
lines, their depth in their leading spaces; ``show`` folds them to the width.
Recorded text goes through ``printable``; ``full``: nothing is cut."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from cli.display.data import data_lines, scalar
from cli.display.render import SOURCE_EXECUTED, seconds, timed
from cli.display.runtime_label import runtime_text
from cli.display.table import ABSENT, figure
from orchestrator.canonical import text_bytes
from orchestrator.costing import money
from orchestrator.envelope import reported
from orchestrator.interop.records import IMPORT_MODE
from orchestrator.source_figures import IMPORT_EVENT, counted_run_level
from orchestrator.terminal_text import one_line, printable
from orchestrator.token_drift import check_trajectory
from orchestrator.trajectory import CallView, EventView, ResponseView, Trajectory, TurnRecord
from store.chain import GENESIS_EVENT
from store.read.liveness import CRASHED, RUNNING
from store.read.run_list import when

TASK_LINES = 6  # of the task, unless full
EVENT_LINES = 12  # of an event's data, unless full
SHOWN_BELOW = ("patch",)  # run events printed in full after the turns


def flat(text: str, width: int | None) -> str:
    """``text`` on one line, controls escaped; cut to ``width`` unless it is None."""
    return one_line(text, 10**12 if width is None else width)


def _count(value: int, source: str) -> str:
    """A token count, or ``absent`` when the server (or the source) sent none."""
    shown = reported(value, source)
    return "absent" if shown is None else figure(shown)


def trajectory_header(trajectory: Trajectory, *, full: bool = False) -> list[str]:
    r = trajectory.run
    cut = None if full else 100
    lines = [f"run {r.id}  ({r.mode}, {r.status}{', ' + r.verdict if r.verdict else ''})",
             *task_lines(r.task, full=full),
             f"  repo:    {flat(r.repo, None if full else 200)}",
             f"  model:   {flat(r.request_model, cut)}",
             *([f"  sandbox: {runtime_text(r.config.get('sandbox_runtime'))}"] if r.mode != IMPORT_MODE else []),
             *constraint_lines(r.config),
             f"  started: {when(r.created_at)}   finished: {when(r.finished_at)}"]
    tokens = check_trajectory(trajectory)
    if tokens.calls:
        lines.append(f"  tokens:  {tokens.summary()} (escrow tokens)")
    if r.parent_run_id:
        lines.append(
            f"  forked from {r.parent_run_id} at turn {r.forked_at_turn}" if r.forked_at_turn is not None
            else f"  {r.mode} of {r.parent_run_id}"
        )
    if r.verdict_detail:
        lines.append(f"  detail:  {flat(r.verdict_detail, cut)}")
    if r.status == RUNNING:
        lines.append("  no verdict recorded yet: the run is still running (its lease is being renewed)")
    elif r.status == CRASHED:
        lines.append(f"  crashed: no verdict recorded, and the process that ran it is gone (its lease lapsed); "
                     f"last alive {when(r.last_alive_at)}")
    for event in trajectory.run_events:
        if event.kind == GENESIS_EVENT:
            continue  # the run row's own columns, chained for verify
        if event.kind in SHOWN_BELOW:
            lines.append(f"  event {flat(event.kind, 40)}: shown below")
            continue
        if event.kind == "engine" and not full and (engine := engine_line(event)):
            lines.append(engine)  # the engine probe's findings in a line; --full has each field
            continue
        lines += event_lines(event, full=full)
        counted = counted_run_level(event.data_json) if event.kind == IMPORT_EVENT else None
        if counted:
            figures = ", ".join(f"{name} {scalar(name, value)}" for name, value in counted.items() if value is not None)
            lines.append(f"  run-level (the source's own, given for no call; counted in its totals): {figures}")
    return lines


def constraint_lines(config: Mapping[str, Any]) -> list[str]:
    """The run's constrained decoding, from its spec (every request carries it);
    a call that broke it shows as a ``constraint_not_honoured`` event."""
    spec = config.get("spec")
    constraint = spec.get("constraint") if isinstance(spec, dict) else None
    if not isinstance(constraint, dict):
        return []
    loosened = constraint.get("loosened") or []
    fields = ", ".join(sorted(constraint.get("fields") or {}))
    return [f"  constrain: {flat(str(constraint.get('kind')), 20)} ({flat(str(constraint.get('engine')), 30)}, "
            f"sent as {flat(fields, 40)}){f', {len(loosened)} field(s) loosened' if loosened else ''}"]


def task_lines(task: str, *, full: bool) -> list[str]:
    """The task with its own lines; past ``TASK_LINES`` collapsed unless full."""
    lines = printable(task.strip("\n")).expandtabs().splitlines() or [""]
    shown = lines if full or len(lines) <= TASK_LINES + 1 else lines[:TASK_LINES]
    out = [f"  task:    {shown[0]}", *(f"           {line}" for line in shown[1:])]
    if len(shown) < len(lines):
        out.append(f"           … {len(lines) - len(shown)} more lines (--full shows them)")
    return out


def engine_line(event: EventView) -> str | None:
    """The engine event as one header line: the engine, its version when
    known, and how it was told (the rest is under --full)."""
    try:
        data = json.loads(event.data_json)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(data, dict) or not data.get("engine"):
        return None
    said = ", ".join(str(v) for v in (data.get("version"), data.get("evidence")) if v)
    return f"  engine:  {flat(str(data['engine']), 60)}" + (f" ({flat(said, 120)})" if said else "")


def event_lines(event: EventView, *, full: bool, depth: int = 1) -> list[str]:
    """``event KIND:`` and its data as ``key: value`` lines under it."""
    lead = "  " * depth
    try:
        data = json.loads(event.data_json)
    except (json.JSONDecodeError, RecursionError):
        data = None
    if not isinstance(data, (dict, list)):
        return [f"{lead}event {flat(event.kind, 40)}: {printable(event.data_json, newlines=False)}"]
    lines = data_lines(data, full=full)
    shown = lines if full or len(lines) <= EVENT_LINES + 1 else lines[:EVENT_LINES]
    out = [f"{lead}event {flat(event.kind, 40)}:", *(lead + "  " + line for line in shown)]
    if len(shown) < len(lines):
        out.append(f"{lead}  … {len(lines) - len(shown)} more lines (--full shows them)")
    return out


IN_FLIGHT_NO_RESPONSE = (
    "  the run stopped while this call was in flight: its request was committed before the call was made, "
    "no response was recorded")
IN_FLIGHT_AFTER_RESPONSE = (
    "  the run stopped during this turn, after the model answered: the request and the envelope are each "
    "committed the moment they happen; the turn's candidates, tool results and events are committed with "
    "the turn, so none of them were (a tool call in progress when the run died leaves no trace but the envelope)")


def in_flight_lines(record: TurnRecord, *, full: bool = False) -> list[str]:
    """What a turn the run died in has recorded, and why the rest is missing."""
    if not record.calls or record.committed:
        return []
    answered = [c.response for c in record.calls if c.response is not None]
    lines = [IN_FLIGHT_AFTER_RESPONSE if answered else IN_FLIGHT_NO_RESPONSE]
    for response in answered:
        for index, proposed in enumerate(response.envelope().payload.tool_calls):
            lines.append(f"  proposed tool call {index} (never committed): {flat(proposed.name, None if full else 60)} "
                         f"{flat(proposed.arguments, None if full else 70)}")
    return lines


def turn_lines(record: TurnRecord, *, full: bool = True) -> list[str]:
    """A turn's call details: its calls' figures, its candidates' paths
    through escrow and its events (the words and outputs are in the steps)."""
    lines: list[str] = []
    for call in record.calls:
        lines += call_lines(call, full=full)
    executions = {e.candidate_id: e for e in record.tool_executions}
    for cand in record.candidates:
        run = executions.get(cand.id)
        path = " -> ".join(t.to_state for t in cand.transitions) or "no transitions"
        if run is not None and run.imported:
            path = SOURCE_EXECUTED
        lines.append(f"  candidate {cand.candidate_index} {flat(cand.tool_name or '?', 60)}: {path}")
        if run is None:
            continue
        figures = f"exit {figure(run.exit_code)}  {timed(run.duration_s, 3)}"
        if not run.imported:
            figures = f"{run.decision or ABSENT} by {flat(run.rule or ABSENT, None if full else 80)}  {figures}"
            figures += f"  stdout {figure(run.stdout_bytes)} B{' (capped)' if run.stdout_truncated else ''}"
        lines.append(f"    {figures}")
        what = "output" if run.imported else "observation"
        lines.append(f"    {what} {figure(len(text_bytes(run.observation)))} B, sha256 {run.observation_sha256[:16]}"
                     " (its text is above)")
    for event in record.events:
        lines += event_lines(event, full=full)
    return lines


def call_lines(call: CallView, *, full: bool) -> list[str]:
    resp = call.response
    limit = "absent (the source gives none)" if "max_tokens" in call.absent_fields else figure(call.max_tokens)
    lines = [f"  call {call.id[:12]} request sha256 {call.request_sha256[:16]}  max_tokens {limit}"]
    if resp is None:
        return [*lines, "    no response recorded"]
    total = None if call.imported and not resp.total_s else resp.total_s  # the source gave no time: stored as 0
    finish = json.loads(resp.finish_reasons)[0] if resp.finish_reasons else ABSENT
    lines.append(
        f"    {resp.status} finish={flat(str(finish), 40)}"
        f"  tokens in {_count(resp.input_tokens, resp.input_tokens_source)} (cached "
        f"{_count(resp.cached_input_tokens, resp.cached_input_tokens_source)}) out "
        f"{_count(resp.output_tokens, resp.output_tokens_source)}"
        f"  ttft {seconds(resp.ttft_s, 3)} total {seconds(total, 3)}  attempts {resp.n_attempts}"
        f"  cost {dollars(resp.cost_usd)}"
    )
    if resp.error_message:
        lines.append(f"    error {resp.error_type}: {flat(resp.error_message, None if full else 90)}")
    if resp.reasoning:
        lines.append(f"    reasoning {reasoning_figures(resp)}")
    return lines


dollars = money.dollars


def reasoning_figures(resp: ResponseView) -> str:
    """Size of the reasoning: its bytes and, when the server counted them,
    its tokens and their convention (its text is in the model's step)."""
    size = f"{figure(len(text_bytes(resp.reasoning)) if resp.reasoning else 0)} B"
    if resp.reasoning_tokens is None:
        return f"({size})"
    return f"({size}, {figure(resp.reasoning_tokens)} tokens, {resp.reasoning_convention})"
