"""Pure: the chained rows of one imported trajectory, in chain order.

A call of the source becomes a request row, a response row (envelope) and
one attempt; its tool results become candidates and tool executions with no
ACL decision (none was made). Figures the source lacks are stored as 0 with
source ``absent``; ``sampling.extra.absent`` lists the request fields the
source does not give (max_tokens is then a placeholder 1, as the contract
requires one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.contract import Message, ModelRequest, Sampling, ToolCall
from orchestrator.envelope import Attempt, Envelope, FigureSource, Payload, Status, Timings, Usage
from orchestrator.interop import SourceTrajectory
from orchestrator.interop.records import SourceMessage
from orchestrator.source_figures import IMPORT_EVENT, RUN_LEVEL
from orchestrator.trajectory import SOURCE_REASONING_EVENT
from store.chain import VERDICT_EVENT
from store.write import rows as build
from store.write.blobs import History
from store.write.rows import Pending

IMPORTED_VERDICT = "IMPORTED"
ABSENT_REQUEST_FIELDS = ("max_tokens", "temperature", "top_p", "stop", "tools")
TRUNCATED = {"length", "max_tokens", "model_length"}
REFUSED = {"content_filter", "refusal"}


def status_of(finish_reason: str | None) -> Status:
    reason = (finish_reason or "").lower()
    if reason in TRUNCATED:
        return Status.TRUNCATED
    if reason in REFUSED:
        return Status.REFUSED
    return Status.COMPLETED


def figure(value: int | None) -> tuple[int, FigureSource]:
    return (0, "absent") if value is None else (value, "server")


def envelope_of(item: SourceMessage) -> Envelope:
    call, message = item.call, item.message
    assert call is not None
    prompt, prompt_source = figure(call.usage.prompt_tokens)
    cached, cached_source = figure(call.usage.cached_tokens)
    completion, completion_source = figure(call.usage.completion_tokens)
    status = status_of(call.finish_reason)
    total_s = call.duration_s or 0.0
    return Envelope(
        status=status,
        payload=Payload(text=message.content or "", tool_calls=message.tool_calls),
        finish_reason=call.finish_reason,
        usage=Usage(
            prompt_tokens=prompt,
            cached_prompt_tokens=cached,
            completion_tokens=completion,
            prompt_source=prompt_source,
            cached_source=cached_source,
            completion_source=completion_source,
        ),
        timings=Timings(total_s=total_s),
        model=call.model,
        logprobs=call.logprobs,
        attempts=(Attempt(number=1, status=status, duration_s=total_s),),
    )


def request_of(model: str, history: Sequence[Message]) -> ModelRequest:
    messages = tuple(history) or (Message(role="user", content=""),)
    return ModelRequest(
        model=model,
        messages=messages,
        max_tokens=1,
        sampling=Sampling(temperature=None, extra={"imported": True, "absent": list(ABSENT_REQUEST_FIELDS)}),
    )


class RunBuilder:
    """The rows of one imported trajectory, in chain order."""

    def __init__(self, run_id: str, trajectory: SourceTrajectory, now: float) -> None:
        self.run_id, self.trajectory, self.now = run_id, trajectory, now
        self.rows: list[Pending] = []
        self.blobs: dict[str, str] = {}  # the requests' messages and tools, stored once (store.write.blobs)
        self.history: History | None = None
        self.turn = 0
        self.turn_start = 0
        self.turn_messages: list[Message] = []
        self.call_id: str | None = None
        self.open_calls: dict[str, ToolCall] = {}
        self.tool_ids: list[str] = []
        self.next_index = 0

    def close_turn(self) -> None:
        if self.call_id is None:
            return
        n = len(self.rows) - self.turn_start
        self.rows.append(build.turn_row(self.run_id, self.turn, n, self.turn_messages, self.now))
        self.turn_messages, self.call_id = [], None

    def add_call(self, item: SourceMessage, history: Sequence[Message]) -> None:
        self.close_turn()
        self.turn += 1
        self.turn_start = len(self.rows)
        call = item.call
        assert call is not None
        # The model asked for (the source's configured one) groups reports; the one that answered is the envelope's.
        model = self.trajectory.model or call.model or "unknown"
        self.call_id = build.new_row_id()
        stored = build.request_row(
            self.call_id, self.run_id, self.turn, request_of(model, history), None, call.at or self.now, self.history
        )
        self.rows.append(stored.row)
        self.blobs.update(stored.blobs)
        self.history = stored.history
        answered_at = call.at + (call.duration_s or 0.0) if call.at is not None else self.now
        self.rows += build.response_rows(
            self.call_id, self.run_id, self.turn, envelope_of(item), call.usage.cost_usd, answered_at
        )
        if call.reasoning:
            self.rows.append(
                build.event_row(self.run_id, self.turn, SOURCE_REASONING_EVENT, {"text": call.reasoning}, self.now)
            )
        self.open_calls = {c.id: c for c in item.message.tool_calls}
        self.tool_ids = [c.id for c in item.message.tool_calls]
        self.next_index = len(self.tool_ids)
        self.turn_messages.append(item.message)

    def add_observation(self, item: SourceMessage) -> None:
        obs = item.observation
        assert obs is not None and self.call_id is not None
        proposed = self.open_calls.pop(obs.tool_call_id, None) if obs.tool_call_id else None
        if proposed is not None:
            index = self.tool_ids.index(proposed.id)
            tool_call: Any = proposed
            arguments: Any = proposed.arguments
        else:
            # A text action (or a result naming no call of this message): a candidate after the tool calls.
            index, self.next_index = self.next_index, self.next_index + 1
            tool_call = {"name": obs.tool_name, "text_action": obs.action}
            arguments = None if obs.action is None else {"action": obs.action}
        candidate_id = build.new_row_id()
        self.rows.append(
            build.candidate_row(
                candidate_id, self.run_id, self.turn, self.call_id, index, tool_call, obs.at or self.now
            )
        )
        detail = {"imported": True, **({"error": obs.error} if obs.error else {})}
        self.rows.append(
            build.tool_execution_row(
                self.run_id,
                self.turn,
                candidate_id,
                tool=obs.tool_name,
                arguments_json=arguments,
                decision=None,
                rule=None,
                reason=None,
                exit_code=obs.exit_code,
                stdout=None,
                stderr=None,
                duration_s=obs.duration_s,
                observation=item.message.content or "",
                cap=0,
                now=obs.at or self.now,
                ok=None if obs.exit_code is None else obs.exit_code == 0,
                detail=detail,
            )
        )
        self.turn_messages.append(item.message)


def trajectory_rows(
    run_id: str, trajectory: SourceTrajectory, meta: dict[str, Any], now: float, ended: float | None = None
) -> tuple[list[Pending], dict[str, str]]:
    """Pure: every chained row of one imported trajectory, and the blobs its
    requests refer to. ``now``: the run's start (rows the source gives no
    time for); ``ended``: its end, the verdict's time (the run's finished_at)."""
    builder = RunBuilder(run_id, trajectory, now)
    builder.rows.append(build.event_row(run_id, None, IMPORT_EVENT, {**meta, **run_level(trajectory),
                                                                    "info": trajectory.info}, now))
    histories: dict[int, list[Message]] = {}
    for item in trajectory.messages:
        history = histories.setdefault(item.conversation, [])
        if item.call is not None:
            builder.add_call(item, history)
        elif item.observation is not None and builder.call_id is not None:
            builder.add_observation(item)
        elif builder.call_id is not None:
            builder.turn_messages.append(item.message)
        history.append(item.message)
    builder.close_turn()
    builder.rows.append(
        build.event_row(
            run_id, None, VERDICT_EVENT, {"verdict": IMPORTED_VERDICT, "detail": outcome_of(trajectory)},
            max(now, ended or now),
        )
    )
    return builder.rows, builder.blobs


def run_level(trajectory: SourceTrajectory) -> dict[str, Any]:
    """The source's run-level totals as the import event records them:
    ``reported`` (all of them) and ``counted`` (those no call gives, which
    count in the run's totals and in aggregates, marked run-level)."""
    counted = trajectory.run_level_counted()
    return {RUN_LEVEL: {
        "reported": None if trajectory.run_usage is None else trajectory.run_usage.model_dump(),
        "counted": None if counted is None else counted.model_dump(),
    }}


def outcome_of(trajectory: SourceTrajectory) -> str:
    """The source's own outcome, as the verdict detail (Escrow verified nothing)."""
    info = trajectory.info
    parts = [f"{trajectory.format} {trajectory.version}"]
    if info.get("exit_status"):
        parts.append(f"exit status {info['exit_status']}")
    if isinstance(info.get("scores"), dict):
        parts.append(
            "scores "
            + ", ".join(f"{k}={v.get('value') if isinstance(v, dict) else v}" for k, v in info["scores"].items())
        )
    return "; ".join(parts)


def first_time(trajectory: SourceTrajectory) -> float | None:
    times = message_times(trajectory)
    return min(times) if times else None


def last_time(trajectory: SourceTrajectory) -> float | None:
    times = message_times(trajectory)
    return max(times) if times else None


def message_times(trajectory: SourceTrajectory) -> list[float]:
    """The times the source gives its calls and tool results."""
    out = []
    for m in trajectory.messages:
        if m.call is not None and m.call.at is not None:
            out.append(m.call.at + (m.call.duration_s or 0.0))
        if m.observation is not None and m.observation.at is not None:
            out.append(m.observation.at)
    return out
