"""Two runs aligned by turn, and where they first part. Pure.

Each aligned turn is checked in the order a replay meets it: the request the
loop built, then what the model answered, then the tool calls that reached
escrow and the ACL's decision on them, then what the tools returned. Each
check uses ``orchestrator.replay.divergence.compare``, the function
``escrow replay`` reports divergences with, so the field named here is the
one replay would name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestrator.envelope import reported
from orchestrator.replay.divergence import compare, differing_paths
from orchestrator.trajectory import ResponseView, RunView, Trajectory, TurnRecord

REPLAYS = {"replay": "replayed", "reexecute": "re-executed", "fork": "fork"}
ORIGINALS = {"replay": "recorded", "reexecute": "recorded", "fork": "parent"}


@dataclass(frozen=True)
class Side:
    """One run's figures for one turn; None where the run has no such turn."""

    input_tokens: int | None  # None: no call of the turn reported it
    cached_tokens: int | None
    output_tokens: int | None
    cost_usd: float
    total_s: float
    status: str


@dataclass(frozen=True)
class Difference:
    kind: str
    field: str
    fields: tuple[str, ...]
    diff: str


@dataclass(frozen=True)
class AlignedTurn:
    turn: int
    a: Side | None
    b: Side | None
    difference: Difference | None

    def delta(self, name: str) -> float | None:
        if self.a is None or self.b is None or getattr(self.a, name) is None or getattr(self.b, name) is None:
            return None
        return float(getattr(self.b, name)) - float(getattr(self.a, name))


@dataclass(frozen=True)
class Comparison:
    a: Trajectory
    b: Trajectory
    turns: tuple[AlignedTurn, ...]

    @property
    def first_divergence(self) -> AlignedTurn | None:
        return next((t for t in self.turns if t.difference is not None), None)

    @property
    def labels(self) -> tuple[str, str]:
        return labels(self.a.run, self.b.run)


def labels(a: RunView, b: RunView) -> tuple[str, str]:
    """What the page calls the two runs: "recorded" and "replayed" (or parent
    and fork) only when one was made from the other; two unrelated runs by
    their short id and model."""
    if a.id != b.id:
        if b.parent_run_id == a.id and b.mode in REPLAYS:
            return ORIGINALS[b.mode], REPLAYS[b.mode]
        if a.parent_run_id == b.id and a.mode in REPLAYS:
            return REPLAYS[a.mode], ORIGINALS[a.mode]
    return f"{a.id[:12]} ({a.request_model})", f"{b.id[:12]} ({b.request_model})"


def _reported_sum(responses: list[ResponseView], name: str) -> int | None:
    values = [reported(getattr(r, name), getattr(r, f"{name}_source")) for r in responses]
    counted = [v for v in values if v is not None]
    return sum(counted) if counted else None


def _side(record: TurnRecord) -> Side:
    responses = [c.response for c in record.calls if c.response is not None]
    status = ",".join(sorted({r.status for r in responses})) or "NO RESPONSE"
    return Side(
        input_tokens=_reported_sum(responses, "input_tokens"),
        cached_tokens=_reported_sum(responses, "cached_input_tokens"),
        output_tokens=_reported_sum(responses, "output_tokens"),
        cost_usd=sum(r.cost_usd or 0.0 for r in responses),
        total_s=sum(r.total_s for r in responses),
        status=status,
    )


def _request(record: TurnRecord) -> Any:
    main = next((c for c in record.calls if c.attempt_of is None), None)
    return json.loads(main.request_json) if main is not None else None


def _answer(record: TurnRecord) -> Any:
    out: list[dict[str, Any] | None] = []
    for call in record.calls:
        if call.response is None:
            out.append(None)
            continue
        envelope = json.loads(call.response.envelope_json)
        out.append({"status": envelope.get("status"), "finish_reason": envelope.get("finish_reason"),
                    "payload": envelope.get("payload")})
    return out


def _tool_calls(record: TurnRecord) -> Any:
    return [{"tool": c.tool_name, "arguments": json.loads(c.tool_call_json)} for c in record.candidates]


def _acl(record: TurnRecord) -> Any:
    return [{"tool": e.tool_name, "decision": e.decision, "rule": e.rule} for e in record.tool_executions]


def _observations(record: TurnRecord) -> Any:
    return [
        {"tool": e.tool_name, "observation": e.observation, "exit_code": e.exit_code} for e in record.tool_executions
    ]


CHECKS = (
    ("request", _request),
    ("response", _answer),
    ("tool_call", _tool_calls),
    ("acl", _acl),
    ("tool_result", _observations),
)


def _request_hashes(record: TurnRecord) -> tuple[str, ...]:
    return tuple(c.request_sha256 for c in record.calls if c.attempt_of is None)


def difference(a: TurnRecord | None, b: TurnRecord | None, *, diff: bool = True,
               names: tuple[str, str] = ("a", "b")) -> Difference | None:
    """The first check on which two recordings of a turn differ, at its first
    field. Requests are compared by their recorded sha256 first, as replay
    does, and parsed only when the hashes differ. Without ``diff`` only the
    field is found (the page shows the diff of the first divergence only)."""
    if a is None or b is None:
        missing = "a" if a is None else "b"
        return Difference(kind="exhausted", field="turns", fields=("turns",), diff=f"run {missing} has no turn here\n")
    for kind, part in CHECKS:
        if kind == "request" and _request_hashes(a) == _request_hashes(b):
            continue
        if not diff:
            found = differing_paths(part(a), part(b), limit=1)
            if found:
                return Difference(kind=kind, field=found[0], fields=tuple(found), diff="")
            continue
        paths, text = compare(part(a), part(b), names)
        if paths:
            return Difference(kind=kind, field=paths[0], fields=paths, diff=text)
    return None


def request_pairs(a: Trajectory, b: Trajectory) -> dict[int, tuple[str | None, str | None]]:
    """By turn, the two main calls whose requests a comparison parses
    (each turn's first; None where a turn has none), where the turn's
    request hashes differ."""
    left, right = {t.turn: t for t in a.turns}, {t.turn: t for t in b.turns}
    pairs: dict[int, tuple[str | None, str | None]] = {}
    for number in sorted(set(left) & set(right)):
        if _request_hashes(left[number]) != _request_hashes(right[number]):
            x, y = (next((c.id for c in t.calls if c.attempt_of is None), None) for t in (left[number], right[number]))
            pairs[number] = (x, y)
    return pairs


def first_divergent_turn(a: Trajectory, b: Trajectory) -> int | None:
    """The first turn that differs, found without any request text: a turn
    whose request hashes differ counts as differing."""
    left, right = {t.turn: t for t in a.turns}, {t.turn: t for t in b.turns}
    for number in sorted(set(left) | set(right)):
        x, y = left.get(number), right.get(number)
        if x is None or y is None or _request_hashes(x) != _request_hashes(y) or difference(x, y) is not None:
            return number
    return None


def with_requests(trajectory: Trajectory, texts: dict[str, str]) -> Trajectory:
    """The trajectory with the given calls' request text filled in."""
    def record(t: TurnRecord) -> TurnRecord:
        if not any(c.id in texts for c in t.calls):
            return t
        calls = tuple(c.model_copy(update={"request_json": texts[c.id]}) if c.id in texts else c for c in t.calls)
        return t.model_copy(update={"calls": calls})

    return trajectory.model_copy(update={"turns": tuple(record(t) for t in trajectory.turns)})


def align(a: Trajectory, b: Trajectory) -> Comparison:
    names = labels(a.run, b.run)
    left = {t.turn: t for t in a.turns}
    right = {t.turn: t for t in b.turns}
    turns = []
    parted = False
    for number in sorted(set(left) | set(right)):
        x, y = left.get(number), right.get(number)
        found = difference(x, y, diff=not parted, names=names)
        parted = parted or found is not None
        turns.append(AlignedTurn(turn=number, a=_side(x) if x else None, b=_side(y) if y else None, difference=found))
    return Comparison(a=a, b=b, turns=tuple(turns))
