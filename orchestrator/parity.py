"""Parity of a recorded answer with a re-sent one. Pure.

Two answers to the same request are compared the way vLLM's own tests
compare engines (``check_logprobs_close``): walk the tokens to the first one
that differs; if each side's token is among the other side's top-k there,
the divergence is a *near tie* (both engines saw two almost equally likely
tokens and picked differently), otherwise it is a real difference. Without
logprobs on both sides the texts are compared by character and a difference
cannot be judged a near tie. The tool calls that would have been released
(a COMPLETED answer's) and the status are compared too.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from orchestrator.contract import Frozen, ToolCall
from orchestrator.envelope import Envelope, Status
from orchestrator.logprobs import TokenLogprob, read_logprobs

Verdict = Literal["identical", "near_tie", "divergent", "status_changed"]
VERDICTS: tuple[Verdict, ...] = ("identical", "near_tie", "divergent", "status_changed")


class Divergence(Frozen):
    """Where two answers first differ. ``unit`` says whether ``position``
    counts tokens (logprobs on both sides) or characters (text only)."""

    position: int
    unit: Literal["token", "char"]
    recorded: str | None
    replayed: str | None
    near_tie: bool | None = None


class Comparison(Frozen):
    verdict: Verdict
    recorded_status: Status
    replayed_status: Status
    divergence: Divergence | None = None
    tool_calls_equal: bool
    tool_call_difference: str | None = None


def released_calls(envelope: Envelope) -> tuple[ToolCall, ...]:
    """What escrow would have released: a COMPLETED answer's tool calls."""
    return envelope.payload.tool_calls if envelope.status is Status.COMPLETED else ()


def _call_key(call: ToolCall) -> tuple[str, str]:
    try:
        arguments = json.dumps(json.loads(call.arguments), sort_keys=True, separators=(",", ":"))
    except ValueError:
        arguments = call.arguments
    return call.name, arguments


def tool_call_difference(recorded: Sequence[ToolCall], replayed: Sequence[ToolCall]) -> str | None:
    """None when the same calls (by name and parsed arguments) would be
    released; otherwise the first difference, in words. Ids are not compared:
    engines mint them."""
    for index, (a, b) in enumerate(zip(recorded, replayed, strict=False)):
        ka, kb = _call_key(a), _call_key(b)
        if ka[0] != kb[0]:
            return f"call {index}: {ka[0]} became {kb[0]}"
        if ka[1] != kb[1]:
            return f"call {index} {ka[0]}: arguments {ka[1]} became {kb[1]}"
    if len(recorded) != len(replayed):
        return f"{len(recorded)} calls became {len(replayed)}"
    return None


def token_divergence(recorded: Sequence[TokenLogprob], replayed: Sequence[TokenLogprob]) -> Divergence | None:
    for i, (a, b) in enumerate(zip(recorded, replayed, strict=False)):
        if a.key != b.key:
            near = (a.key in b.top_keys() and b.key in a.top_keys()) if a.top and b.top else None
            return Divergence(position=i, unit="token", recorded=a.token, replayed=b.token, near_tie=near)
    if len(recorded) != len(replayed):
        i = min(len(recorded), len(replayed))
        recorded_token = recorded[i].token if i < len(recorded) else None
        replayed_token = replayed[i].token if i < len(replayed) else None
        return Divergence(position=i, unit="token", recorded=recorded_token, replayed=replayed_token, near_tie=False)
    return None


def text_divergence(recorded: str, replayed: str) -> Divergence | None:
    if recorded == replayed:
        return None
    i = next(
        (n for n, (a, b) in enumerate(zip(recorded, replayed, strict=False)) if a != b),
        min(len(recorded), len(replayed)),
    )
    return Divergence(position=i, unit="char", recorded=recorded[i:i + 16] or None, replayed=replayed[i:i + 16] or None)


def compare(recorded: Envelope, replayed: Envelope) -> Comparison:
    a, b = read_logprobs(recorded.logprobs), read_logprobs(replayed.logprobs)
    divergence = token_divergence(a, b) if a and b else None
    if divergence is None:
        # Equal tokens (or no tokens to compare): the texts must agree as well.
        divergence = text_divergence(recorded.payload.text, replayed.payload.text)
    difference = tool_call_difference(released_calls(recorded), released_calls(replayed))
    if recorded.status is not replayed.status:
        verdict: Verdict = "status_changed"
    elif divergence is None and difference is None:
        verdict = "identical"
    elif divergence is not None and divergence.near_tie:
        verdict = "near_tie"
    else:
        verdict = "divergent"
    return Comparison(
        verdict=verdict, recorded_status=recorded.status, replayed_status=replayed.status, divergence=divergence,
        tool_calls_equal=difference is None, tool_call_difference=difference,
    )


class CallParity(Frozen):
    """One recorded call against its re-sends: ``comparison`` is the first
    re-send against the record; ``noise`` counts the further re-sends
    (``--repeat``) that differ from the first, the engine's own nondeterminism."""

    call_id: str
    turn: int | None
    comparison: Comparison
    repeats: int = 1
    noise: int = 0
    seconds: float = 0.0


class RunParity(Frozen):
    run_id: str
    model_url: str
    engine: str | None = None
    recorded_engines: tuple[str, ...] = ()
    calls: tuple[CallParity, ...]
    verdicts: dict[str, int]
    noisy_calls: int

    @property
    def real_differences(self) -> int:
        return self.verdicts.get("divergent", 0) + self.verdicts.get("status_changed", 0)


def summarize(run_id: str, model_url: str, calls: Sequence[CallParity], *, engine: str | None = None,
              recorded_engines: tuple[str, ...] = ()) -> RunParity:
    counts = Counter(c.comparison.verdict for c in calls)
    return RunParity(
        run_id=run_id, model_url=model_url, calls=tuple(calls), engine=engine, recorded_engines=recorded_engines,
        verdicts={v: counts.get(v, 0) for v in VERDICTS}, noisy_calls=sum(1 for c in calls if c.noise),
    )
