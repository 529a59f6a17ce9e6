"""Training sequences a trainer reads without retokenizing. Pure.

A run becomes one sequence per unbroken chain of token ids (the drift
check's classes): a FORK starts a new sequence, a REALIGN continues it. A
sequence's ids are its last call's prompt ids and sampled ids, which by the
chain contain every earlier call's prompt and kept answer; the loss mask is
1 exactly on the ids an engine sampled in an answer that was released (a
COMPLETED call), and 0 on template, tool and harness ids, on answers the
escrow quarantined, and on end-of-turn ids a REALIGN replaced. A run with an
answered call whose ids are absent, or whose ids contradict its own figures,
is refused with the reason: it is never retokenized.

The reward is the verifier's verdict and nothing else (``reward_of``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from orchestrator.contract import Frozen
from orchestrator.envelope import Envelope, Status
from orchestrator.errors import ReportError
from orchestrator.logprobs import read_logprobs
from orchestrator.token_drift import CallCheck, TokenClass, call_ids, classify

Shape = Literal["flat", "trl", "verl", "atif"]
SHAPES: tuple[str, ...] = ("flat", "trl", "verl", "atif")
PASS = "PASS"
# Endings that say nothing of the patch: the verifier did not judge it, or its
# pass cannot be trusted (an imported run's verdict is its source's).
NO_REWARD = frozenset({"INFRA_ERROR", "CANCELED", "SUSPECT", "IMPORTED"})
"""Verdicts that say nothing about the model's answer (our side failed, the
user stopped it) or that withhold the verifier's pass (SUSPECT: the verifier
passed a patch that is held for review): no reward, the row kept apart."""
ANSWERED = frozenset({Status.COMPLETED.value, Status.TRUNCATED.value})


class RolloutRefused(ReportError):
    """A run whose token ids cannot make an exact training sequence."""


def reward_of(verdict: str | None) -> float | None:
    """The one place a verdict becomes a reward: 1.0 for the verifier's PASS,
    None where there is no verdict on the answer (see ``NO_REWARD``, and a
    run without a verdict), 0.0 for every other ending (the verifier never passed)."""
    if verdict is None or verdict in NO_REWARD:
        return None
    return 1.0 if verdict == PASS else 0.0


class RolloutCall(Frozen):
    call_id: str
    turn: int | None
    envelope: Envelope
    teacher_logprobs: tuple[float | None, ...] | None = None
    """A teacher's logprob of each sampled id (``escrow score``), when asked for in the export."""
    teacher_top: tuple[tuple[tuple[int, float | None], ...], ...] | None = None
    """That teacher's top K (id, logprob) at each sampled id, best first; None where it gave none by id."""
    teacher_top_k: int | None = None


class Provenance(Frozen):
    run_id: str
    verdict: str | None
    model: str | None
    engine: str | None
    sampling: dict[str, Any]


class RolloutSequence(Frozen):
    sequence: int
    call_ids: tuple[str, ...]
    turns: tuple[int | None, ...]
    prompt_length: int
    """Ids before the first sampled id: the TRL/verl prompt."""
    input_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    """The sampled ids' logprobs where the mask is 1, 0.0 elsewhere; empty when none were recorded."""
    teacher_logprobs: tuple[float, ...] = ()
    """The teacher's logprob of the sampled ids where the mask is 1, 0.0 elsewhere; empty when not asked for."""
    teacher_top_ids: tuple[tuple[int, ...], ...] = ()
    teacher_top_logprobs: tuple[tuple[float | None, ...], ...] = ()
    """The teacher's top K ids and their logprobs at each position, K a position, best first where the mask
    is 1, the filler (0, 0.0) elsewhere; empty when not asked for, or when a call's top K is absent or not K."""
    steps: tuple[dict[str, Any], ...]
    """ATIF v1.4 step ``metrics``, one a call (``orchestrator.interop.atif_schema.Metrics``)."""


def _refusal(calls: Sequence[RolloutCall], checks: Sequence[CallCheck]) -> str | None:
    for n, (call, check) in enumerate(zip(calls, checks, strict=True), start=1):
        where = f"call {n} (turn {call.turn}, {call.call_id[:12]})"
        if check.token_class is TokenClass.ABSENT and call.envelope.status.value in ANSWERED:
            missing = "prompt" if call.envelope.prompt_token_ids is None else "sampled"
            return f"{where} has no {missing} ids: the engine gave none, and text is never retokenized"
        if check.problems:
            return f"{where}: {check.problems[0]}"
    return None


def sequences(calls: Sequence[RolloutCall]) -> list[RolloutSequence]:
    """The run's training sequences, or RolloutRefused with the reason."""
    checks = classify([call_ids(c.call_id, c.turn, c.envelope) for c in calls])
    reason = _refusal(calls, checks)
    if reason is not None:
        raise RolloutRefused(reason)
    groups: list[list[tuple[RolloutCall, CallCheck]]] = []
    for call, check in zip(calls, checks, strict=True):
        if check.token_class is TokenClass.ABSENT:
            continue  # a call that answered nothing adds no ids
        if not groups or check.token_class is TokenClass.FORK or check.against is None:
            groups.append([])
        groups[-1].append((call, check))
    if not groups:
        raise RolloutRefused("the run has no model call with token ids")
    return [_sequence(n, group) for n, group in enumerate(groups)]


def _sequence(number: int, group: list[tuple[RolloutCall, CallCheck]]) -> RolloutSequence:
    last = group[-1][0].envelope
    ids = (last.prompt_token_ids or ()) + (last.completion_token_ids or ())
    mask = [0] * len(ids)
    logprobs = [0.0] * len(ids)
    teacher = [0.0] * len(ids)
    # The teacher's top K, rectangular (K a position, as verl's and TRL's
    # [T, K] tensors read): only when every call has exactly K at every
    # kept position; a call without them (llama-cpp-python names them by
    # text) leaves the columns out, never zeros in their place.
    ks = {call.teacher_top_k for call, _ in group}
    k = ks.pop() if len(ks) == 1 and all(call.teacher_top is not None for call, _ in group) else None
    # Where the mask is 0, the same filler as logprobs and teacher_logprobs
    # (0.0, and id 0): a masked loss never reads it, and one convention holds
    # for every per-position column.
    top_ids = [(0,) * k for _ in ids] if k else []
    top_logprobs: list[tuple[float | None, ...]] = [(0.0,) * k for _ in ids] if k else []
    any_logprobs = False
    steps = []
    for index, (call, _) in enumerate(group):
        envelope = call.envelope
        start = len(envelope.prompt_token_ids or ())
        sampled = envelope.completion_token_ids or ()
        shown = len(sampled)
        if index + 1 < len(group):
            following = group[index + 1][1]
            if following.retry_of is not None:
                shown = 0  # quarantined: the next prompt does not hold it
            elif following.token_class is TokenClass.REALIGN and following.drift is not None:
                shown = following.drift.position - start  # the end-of-turn ids the template replaced
        read = read_logprobs(envelope.logprobs) if envelope.logprobs is not None else []
        kept = envelope.status is Status.COMPLETED
        for offset in range(shown):
            if kept:
                mask[start + offset] = 1
                scored = call.teacher_logprobs or ()
                if offset < len(scored) and scored[offset] is not None:
                    teacher[start + offset] = scored[offset] or 0.0
                if top_ids:
                    best = (call.teacher_top or ())[offset] if offset < len(call.teacher_top or ()) else ()
                    if len(best) != k:
                        top_ids, top_logprobs = [], []  # not K here: no rectangle to give
                    else:
                        top_ids[start + offset] = tuple(token for token, _ in best)
                        top_logprobs[start + offset] = tuple(logprob for _, logprob in best)
            if offset < len(read):
                logprobs[start + offset] = read[offset].logprob
                any_logprobs = True
        steps.append({"prompt_token_ids": list(envelope.prompt_token_ids or ()),
                      "completion_token_ids": list(sampled),
                      "logprobs": [t.logprob for t in read] if envelope.logprobs is not None else None,
                      "extra": {"call_id": call.call_id, "turn": call.turn, "loss_mask_ids": shown if kept else 0}})
    first_sampled = next((i for i, m in enumerate(mask) if m), len(ids))
    return RolloutSequence(
        sequence=number, call_ids=tuple(c.call_id for c, _ in group), turns=tuple(c.turn for c, _ in group),
        prompt_length=first_sampled, input_ids=ids, loss_mask=tuple(mask),
        logprobs=tuple(logprobs) if any_logprobs else (), steps=tuple(steps),
        teacher_logprobs=tuple(teacher) if all(c.teacher_logprobs is not None for c, _ in group) else (),
        teacher_top_ids=tuple(top_ids), teacher_top_logprobs=tuple(top_logprobs),
    )


def row(provenance: Provenance, seq: RolloutSequence, total: int, shape: str = "flat") -> dict[str, Any]:
    """One row of the export in ``shape``, with the reward and provenance every shape carries."""
    out: dict[str, Any] = {
        "run_id": provenance.run_id, "sequence": seq.sequence, "sequences": total,
        "call_ids": list(seq.call_ids), "turns": list(seq.turns),
        "reward": reward_of(provenance.verdict), "verdict": provenance.verdict,
        "model": provenance.model, "engine": provenance.engine, "sampling": provenance.sampling,
    }
    cut = seq.prompt_length
    logprobs = list(seq.logprobs) if seq.logprobs else None
    if seq.teacher_logprobs:  # with --teacher-model: beside the logprobs, cut as they are
        out["teacher_logprobs"] = list(seq.teacher_logprobs if shape == "flat" else seq.teacher_logprobs[cut:])
    if seq.teacher_top_ids:  # the top K alike: a list of K a position
        start = 0 if shape == "flat" else cut
        out["teacher_top_ids"] = [list(best) for best in seq.teacher_top_ids[start:]]
        out["teacher_top_logprobs"] = [list(best) for best in seq.teacher_top_logprobs[start:]]
    if shape == "flat":
        out.update(input_ids=list(seq.input_ids), loss_mask=list(seq.loss_mask), logprobs=logprobs)
    elif shape == "trl":
        out.update(prompt_ids=list(seq.input_ids[:cut]), completion_ids=list(seq.input_ids[cut:]),
                   tool_mask=list(seq.loss_mask[cut:]), logprobs=None if logprobs is None else logprobs[cut:])
    elif shape == "verl":
        out.update(prompt_ids=list(seq.input_ids[:cut]), response_ids=list(seq.input_ids[cut:]),
                   response_mask=list(seq.loss_mask[cut:]),
                   response_logprobs=None if logprobs is None else logprobs[cut:])
    elif shape == "atif":
        out.update(steps=[{"metrics": step} for step in seq.steps])
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return out
