"""What a person is shown of a turn, whether it is happening now (``escrow
run``) or was recorded (``escrow show``): one ``ModelStep`` per model call and
one ``ToolStep`` per tool call. Both displays render these with the same code,
so the live view and the store's view never disagree."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.canonical import text_bytes
from orchestrator.contract import Frozen
from orchestrator.envelope import Envelope, reported
from orchestrator.trajectory import TurnRecord

# The argument that says what a tool call is about, by tool.
_SUBJECT = {"bash": "command", "submit": "summary"}


class ModelStep(Frozen):
    turn: int
    status: str
    cause: str = ""
    text: str = ""
    reasoning: str = ""
    refusal: str = ""
    prompt_tokens: int | None = None  # None: the server sent no count (a FAULTED call), never shown as 0
    completion_tokens: int | None = None
    seconds: float | None = None


class ToolStep(Frozen):
    turn: int
    index: int
    name: str
    arguments: str = ""
    state: str = "STAGED"
    layer: str | None = None
    reason: str = ""
    decision: str | None = None
    rule: str | None = None
    exit_code: int | None = None
    duration_s: float | None = None
    output_bytes: int = 0
    observation: str = ""
    imported: bool = False  # executed by the source agent: no escrow, no ACL decision made

    @property
    def summary(self) -> str:
        return args_summary(self.name, self.arguments)


def output_size(stream_bytes: int, observation: str) -> int:
    """Bytes a tool call produced: its captured streams, else its observation."""
    return stream_bytes or len(text_bytes(observation))


def cause_of(envelope: Envelope) -> str:
    """Why a model call did not complete, in the envelope's own words."""
    if envelope.status.value == "COMPLETED":
        return ""
    if envelope.payload.refusal:
        return envelope.payload.refusal
    if envelope.error is not None:
        return f"{envelope.error.kind}: {envelope.error.message}"
    return envelope.finish_reason or ""


def model_step(turn: int, envelope: Envelope) -> ModelStep:
    payload, usage = envelope.payload, envelope.usage
    return ModelStep(
        turn=turn, status=envelope.status.value, cause=cause_of(envelope), text=payload.text,
        reasoning=payload.reasoning or "", refusal=payload.refusal or "",
        prompt_tokens=reported(usage.prompt_tokens, usage.prompt_source),
        completion_tokens=reported(usage.completion_tokens, usage.completion_source), seconds=envelope.timings.total_s,
    )


def args_summary(name: str, arguments: str) -> str:
    """``read_file calc.py``, ``bash "pytest -q"``: the call in one line."""
    try:
        args: Any = json.loads(arguments) if arguments.strip() else {}
    except (json.JSONDecodeError, RecursionError):
        return f"{name} {arguments}"
    if not isinstance(args, dict):
        return f"{name} {arguments}"
    if set(args) == {"action"} and isinstance(args["action"], str):
        return args["action"]  # an imported text action (SWE-agent's ``open calc.py``): the tool's own command line
    subject = _SUBJECT.get(name)
    if subject and isinstance(args.get(subject), str):
        return f"{name} {json.dumps(args[subject], ensure_ascii=False)}"
    if isinstance(args.get("path"), str):
        rest = [f"{k}={_short(v)}" for k, v in args.items() if k not in ("path", "content", "old", "new")]
        return " ".join([name, args["path"], *rest])
    return " ".join([name, *(f"{k}={_short(v)}" for k, v in args.items())])


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:39] + "…"


def arguments_of(call: dict[str, Any]) -> str:
    """A recorded call's arguments; an imported text action's, as ``{"action": ...}``."""
    if "arguments" not in call and isinstance(call.get("text_action"), str):
        return json.dumps({"action": call["text_action"]}, ensure_ascii=False)
    return str(call.get("arguments", ""))


def steps_of(record: TurnRecord) -> tuple[list[ModelStep], list[ToolStep]]:
    """The recorded turn as steps; a turn cut short shows what was recorded."""
    models = []
    for call in record.calls:
        if call.response is None:
            models.append(ModelStep(turn=record.turn, status="IN FLIGHT", cause="no response was recorded"))
        else:
            answer = model_step(record.turn, call.response.envelope())
            if call.imported and not call.response.total_s:
                answer = answer.model_copy(update={"seconds": None})  # the source gave no time: stored as 0
            if call.imported and not answer.reasoning:
                answer = answer.model_copy(update={"reasoning": record.source_reasoning()})
            models.append(answer)
    executions = {e.candidate_id: e for e in record.tool_executions}
    tools = []
    for cand in record.candidates:
        call = json.loads(cand.tool_call_json)
        last = cand.transitions[-1] if cand.transitions else None
        step = ToolStep(
            turn=record.turn, index=cand.candidate_index, name=cand.tool_name or call.get("name", "?"),
            arguments=arguments_of(call), state=last.to_state if last else "STAGED",
            layer=last.layer if last else None, reason=last.reason if last else "",
        )
        run = executions.get(cand.id)
        if run is not None:
            step = step.model_copy(update=dict(
                decision=run.decision, rule=run.rule, exit_code=run.exit_code, duration_s=run.duration_s,
                output_bytes=output_size(run.stdout_bytes + run.stderr_bytes, run.observation),
                observation=run.observation, imported=run.imported,
            ))
        tools.append(step)
    return models, tools
