"""The recorded trajectory as read back: frozen views a store returns and
replay, reports, the viewer and the CLI read. Core types: the store builds them,
nothing here does I/O.

Field names are the tables' Python attribute names; JSON columns come back
both as the stored canonical text (``*_json``, byte-exact for hashing and
replay) and, where useful, parsed.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from orchestrator.contract import Frozen, Message, ModelRequest
from orchestrator.envelope import Envelope

_Model = TypeVar("_Model", bound=BaseModel)


def _json_object(text: str) -> dict[str, Any]:
    """A stored JSON object column, parsed."""
    value: dict[str, Any] = json.loads(text)
    return value


class RunView(Frozen):
    id: str
    created_at: float
    finished_at: float | None
    task: str
    repo: str
    mode: str
    request_model: str
    config_json: str
    policy_json: str
    parent_run_id: str | None
    forked_at_turn: int | None
    escrow_version: str
    status: str
    verdict: str | None
    verdict_detail: str | None
    chain_seq: int
    chain_head: str
    last_alive_at: float | None = None
    """Set when the run reads ``crashed``: its owner's last heartbeat (``store.read.liveness``)."""

    @property
    def config(self) -> dict[str, Any]:
        return _json_object(self.config_json)

    @property
    def policy(self) -> dict[str, Any]:
        return _json_object(self.policy_json)


class RunTotals(Frozen):
    """Aggregates over a run's recorded rows."""

    turns: int = 0
    calls: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    responses: int = 0
    unreported: dict[str, int] = {}
    """By figure (input_tokens, cached_input_tokens, output_tokens): how many
    responses the server sent no such count for (recorded 0, source absent)."""

    def reported(self, name: str) -> int | None:
        """The summed figure; None when no response reported it (absent, not 0)."""
        value: int = getattr(self, name)
        return None if self.responses and self.unreported.get(name, 0) >= self.responses else value


class RunSummary(Frozen):
    run: RunView
    totals: RunTotals


class TurnView(Frozen):
    id: str
    run_id: str
    turn: int
    seq: int
    committed_at: float
    n_rows: int
    messages_json: str

    def messages(self) -> tuple[Message, ...]:
        return tuple(Message.model_validate(m) for m in json.loads(self.messages_json))


class AttemptView(Frozen):
    number: int
    status: str
    http_status: int | None
    error_type: str | None
    error_message: str | None
    duration_s: float
    backoff_s: float


class ResponseView(Frozen):
    id: str
    seq: int
    recorded_at: float
    status: str
    finish_reasons: str | None
    http_status: int | None
    response_model: str | None
    system_fingerprint: str | None
    engine: str | None
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    input_tokens_source: str
    cached_input_tokens_source: str
    output_tokens_source: str
    ttft_s: float | None
    decode_s: float | None
    total_s: float
    cost_usd: float | None
    payload_bytes: int
    error_type: str | None
    error_message: str | None
    n_attempts: int
    envelope_json: str
    envelope_sha256: str
    reasoning: str | None = None
    reasoning_tokens: int | None = None
    reasoning_convention: str | None = None

    def envelope(self) -> Envelope:
        return _parsed(Envelope, self.envelope_json)


class CallView(Frozen):
    """A model call: the write-ahead request and, once recorded, its response."""

    id: str
    run_id: str
    turn: int | None
    seq: int
    created_at: float
    attempt_of: str | None
    request_model: str
    max_tokens: int
    temperature: float | None
    top_p: float | None
    top_k: int | None
    seed: int | None
    stop_sequences: str
    sampling_json: str
    deadline_s: float
    max_payload_bytes: int
    request_json: str
    request_sha256: str
    response: ResponseView | None = None
    attempts: tuple[AttemptView, ...] = ()

    def request(self) -> ModelRequest:
        return _parsed(ModelRequest, self.request_json)

    @property
    def imported(self) -> bool:
        """Read from another agent's trajectory (``escrow import``), not made here."""
        extra = _json_object(self.sampling_json).get("extra")
        return isinstance(extra, dict) and extra.get("imported") is True

    @property
    def absent_fields(self) -> tuple[str, ...]:
        """The request fields its source did not give (an imported call's
        ``sampling.extra.absent``: its max_tokens is then a placeholder)."""
        extra = _json_object(self.sampling_json).get("extra")
        absent = extra.get("absent") if isinstance(extra, dict) else None
        return tuple(str(a) for a in absent) if isinstance(absent, list) else ()


class TransitionView(Frozen):
    seq: int
    from_state: str | None
    to_state: str
    layer: str | None
    reason: str
    at: float


class CandidateView(Frozen):
    id: str
    run_id: str
    turn: int | None
    seq: int
    call_id: str
    candidate_index: int
    tool_call_id: str | None
    tool_name: str | None
    tool_call_json: str
    created_at: float
    transitions: tuple[TransitionView, ...] = ()

    @property
    def state(self) -> str | None:
        return self.transitions[-1].to_state if self.transitions else None


class ToolExecutionView(Frozen):
    id: str
    run_id: str
    turn: int | None
    seq: int
    candidate_id: str
    tool_name: str
    arguments_json: str | None
    decision: str | None
    rule: str | None
    reason: str | None
    ok: int | None
    exit_code: int | None
    stdout: str
    stdout_bytes: int
    stdout_sha256: str
    stderr: str
    stderr_bytes: int
    stderr_sha256: str
    duration_s: float | None
    observation: str
    observation_sha256: str
    detail_json: str | None
    at: float

    @property
    def stdout_truncated(self) -> bool:
        return len(self.stdout.encode("utf-8")) < self.stdout_bytes

    @property
    def stderr_truncated(self) -> bool:
        return len(self.stderr.encode("utf-8")) < self.stderr_bytes

    @property
    def imported(self) -> bool:
        """Executed by the source agent, not by Escrow: no escrow, no ACL decision."""
        return self.detail_json is not None and _json_object(self.detail_json).get("imported") is True


SOURCE_REASONING_EVENT = "source_reasoning"  # an imported call's reasoning, one event per call


class EventView(Frozen):
    id: str
    run_id: str
    turn: int | None
    seq: int
    kind: str
    data_json: str
    at: float

    @property
    def data(self) -> dict[str, Any]:
        return _json_object(self.data_json)


class TurnRecord(Frozen):
    """Everything recorded for one turn number. ``committed`` is False for the
    turn in flight when a run stopped: its request is there, the rest is not."""

    turn: int
    committed: TurnView | None
    calls: tuple[CallView, ...] = ()
    candidates: tuple[CandidateView, ...] = ()
    tool_executions: tuple[ToolExecutionView, ...] = ()
    events: tuple[EventView, ...] = ()

    def source_reasoning(self) -> str:
        """An imported turn's reasoning (a source's ``reasoning_content``),
        kept as an event since the source's reply envelope has none."""
        texts = (e.data.get("text") for e in self.events if e.kind == SOURCE_REASONING_EVENT)
        return "\n\n".join(text for text in texts if isinstance(text, str))


class Trajectory(Frozen):
    run: RunView
    turns: tuple[TurnRecord, ...]
    run_events: tuple[EventView, ...] = ()
    """Events recorded outside any turn (turn is NULL), e.g. set-up."""


def _parsed(model: type[_Model], text: str) -> _Model:
    """``text`` validated as ``model``; through ``json`` when pydantic's own
    parser refuses it: a stored text may hold a lone surrogate's escape
    (a file name's byte that is not UTF-8), which only ``json`` reads."""
    try:
        return model.model_validate_json(text)
    except ValidationError:
        return model.model_validate(json.loads(text))
