"""The drift check: does each call's prompt extend, token for token, the
prompt and the sampled ids of the call before it? Pure.

A harness that keeps text and lets the server re-render its chat template
every turn can feed the model other ids than the ones it sampled (text that
re-encodes differently, a tool call re-rendered with other whitespace, a
template that strips past reasoning, compaction). A trainer that takes such
a run as on-policy learns from tokens the model never produced. Each call is
put in one class against the last call whose answer it could continue:

- CLEAN: its prompt ids begin with that call's prompt ids and sampled ids
  (or, when that answer was not kept, with its prompt ids alone: a retry);
- REALIGN: they differ only in the last sampled tokens, where the engine's
  end-of-turn token sits and the template writes its own;
- FORK: history was rewritten (compaction, a template that drops reasoning,
  an answer that re-encodes to other ids): a trainer must start a new
  sequence here;
- ABSENT: the engine gave no ids for the call; nothing is guessed.

Apart from the class, the length checks compare what the call recorded with
what the engine said it counted: prompt ids against ``usage.prompt_tokens``,
sampled ids against ``usage.completion_tokens`` (server figures only), one
logprob per sampled token, and no negative or out-of-vocabulary id. A
contradiction there is a ``problem``: ``escrow verify`` fails the run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, Literal

from orchestrator.contract import Frozen
from orchestrator.envelope import Envelope, Status
from orchestrator.trajectory import CallView, Trajectory

REALIGN_TAIL = 2
"""How many of the last sampled ids may differ in a REALIGN: the engine's
end-of-turn (or end-of-sequence) token and the separator a template puts
after it (Gemma's ``<end_of_turn>`` then ``\\n``; ChatML's ``<|im_end|>`` then ``\\n``)."""
WINDOW = 8
"""Ids shown on each side of a divergence."""
KEPT_STATUSES = frozenset({Status.COMPLETED.value})
"""An answer with one of these statuses is released into the history; any
other (truncated, refused, faulted...) is quarantined, so the next prompt may
continue from its prompt alone."""

LLAMA_CPP = "llama.cpp"
"""How a llama-server's envelopes name it (``Envelope.engine``, from ``/props``)."""

Decode = Callable[[Sequence[int]], str]


class TokenClass(str, Enum):
    CLEAN = "CLEAN"
    REALIGN = "REALIGN"
    FORK = "FORK"
    ABSENT = "ABSENT"


class CallIds(Frozen):
    """What the drift check reads from one recorded call."""

    call_id: str
    turn: int | None = None
    status: str
    finish_reason: str | None = None
    prompt_ids: tuple[int, ...] | None = None
    sampled_ids: tuple[int, ...] | None = None
    logprobs: int | None = None
    """Logprob entries recorded; None when none were asked for."""
    usage_prompt: int | None = None
    """``usage.prompt_tokens`` when the server reported it, else None."""
    usage_completion: int | None = None
    sampled_tokens: tuple[str, ...] | None = None
    """The sampled tokens' text, from the logprob entries, when recorded."""
    unsent_end: bool = False
    """The engine counts an end-of-generation token it does not send (quirk
    ``unsent_end_of_generation``): one sampled id fewer than its count is no contradiction."""


class Drift(Frozen):
    """Where a prompt stops extending the call it was compared with."""

    position: int
    """Index in this call's prompt ids of the first id that differs."""
    within: Literal["prompt", "sampled"]
    """Whether the divergence falls in the earlier call's prompt or in its sampled ids."""
    expected: tuple[int, ...]
    got: tuple[int, ...]
    expected_text: str | None = None
    got_text: str | None = None


class CallCheck(Frozen):
    call_id: str
    turn: int | None
    status: str
    token_class: TokenClass
    against: str | None = None
    """The call compared with; None for the first call of a sequence."""
    retry_of: str | None = None
    """Set when the earlier answer was not kept and this prompt continues its prompt."""
    prompt_ids: int | None = None
    sampled_ids: int | None = None
    drift: Drift | None = None
    problems: tuple[str, ...] = ()


class RunTokens(Frozen):
    run_id: str
    calls: tuple[CallCheck, ...]

    def count(self, token_class: TokenClass) -> int:
        return sum(1 for c in self.calls if c.token_class is token_class)

    @property
    def clean(self) -> int:
        return self.count(TokenClass.CLEAN)

    @property
    def problems(self) -> list[tuple[str, str]]:
        return [(c.call_id, p) for c in self.calls for p in c.problems]

    def summary(self) -> str:
        """``3 of 5 calls CLEAN`` (with the other classes that occur)."""
        others = [f"{self.count(k)} {k.value}" for k in TokenClass if k is not TokenClass.CLEAN and self.count(k)]
        tail = f" ({', '.join(others)})" if others else ""
        return f"{self.clean} of {len(self.calls)} calls CLEAN{tail}"


def call_ids(call_id: str, turn: int | None, envelope: Envelope) -> CallIds:
    usage = envelope.usage
    tokens = None
    if envelope.logprobs is not None:
        # Only their text, for showing a drift: the entries are not read into
        # typed tokens here (a long run holds hundreds of thousands).
        tokens = tuple(e.get("token") if isinstance(e, dict) and isinstance(e.get("token"), str) else ""
                       for e in envelope.logprobs)
    # Built without validating again what the envelope's validation already
    # checked: a long run's prompts hold millions of ids.
    return CallIds.model_construct(
        call_id=call_id, turn=turn, status=envelope.status.value, finish_reason=envelope.finish_reason,
        prompt_ids=envelope.prompt_token_ids, sampled_ids=envelope.completion_token_ids,
        logprobs=None if envelope.logprobs is None else len(envelope.logprobs),
        usage_prompt=usage.prompt_tokens if usage.prompt_source == "server" else None,
        usage_completion=usage.completion_tokens if usage.completion_source == "server" else None,
        sampled_tokens=tokens,
        unsent_end=(envelope.engine or "").startswith(LLAMA_CPP) and envelope.finish_reason == "stop",
    )


def first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    """The first index where ``a`` and ``b`` differ (``min(len)`` when one is
    a prefix of the other). Halves the span with C-speed slice compares."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while hi - lo > 1:  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def length_problems(call: CallIds, vocab_size: int | None = None) -> tuple[str, ...]:
    """Where the recorded ids contradict the call's own figures."""
    out: list[str] = []
    for side, ids in (("prompt", call.prompt_ids), ("sampled", call.sampled_ids)):
        if not ids or (min(ids) >= 0 and (vocab_size is None or max(ids) < vocab_size)):
            continue  # the common case, at C speed: a 200-turn run holds millions of ids
        for position, value in enumerate(ids):
            if value < 0:
                out.append(f"{side} id {value} at position {position} is negative")
                break
            if vocab_size is not None and value >= vocab_size:
                out.append(f"{side} id {value} at position {position} is out of the vocabulary ({vocab_size})")
                break
    if call.prompt_ids is not None and call.usage_prompt is not None and len(call.prompt_ids) != call.usage_prompt:
        out.append(f"{len(call.prompt_ids)} prompt ids, usage.prompt_tokens {call.usage_prompt}")
    sampled = call.sampled_ids
    allowed = {len(sampled or ()), len(sampled or ()) + 1} if call.unsent_end else {len(sampled or ())}
    if sampled is not None and call.usage_completion is not None and call.usage_completion not in allowed:
        out.append(f"{len(sampled)} sampled ids, usage.completion_tokens {call.usage_completion}")
    if sampled is not None and call.logprobs is not None and call.logprobs != len(sampled):
        out.append(f"{call.logprobs} logprobs for {len(sampled)} sampled ids")
    return tuple(out)


def _decoded(decode: Decode | None, ids: Sequence[int]) -> str | None:
    if decode is None or not ids:
        return None if decode is None else ""
    try:
        return decode(ids)
    except Exception:  # a tokenizer that cannot decode (an out-of-vocabulary id) shows no text
        return None


def _sampled_text(base: CallIds, offset: int, count: int) -> str | None:
    """The sampled side's text from the recorded tokens, when the divergence
    falls in them and no tokenizer is at hand."""
    if base.sampled_tokens is None or base.sampled_ids is None or len(base.sampled_tokens) != len(base.sampled_ids):
        return None
    return "".join(base.sampled_tokens[offset: offset + count])


def _drift(call: CallIds, base: CallIds, expected: tuple[int, ...], position: int, decode: Decode | None) -> Drift:
    prompt = call.prompt_ids or ()
    base_prompt = base.prompt_ids or ()
    within: Literal["prompt", "sampled"] = "prompt" if position < len(base_prompt) else "sampled"
    want = expected[position: position + WINDOW]
    got = prompt[position: position + WINDOW]
    expected_text = _decoded(decode, want)
    if expected_text is None and within == "sampled":
        expected_text = _sampled_text(base, position - len(base_prompt), len(want))
    return Drift(position=position, within=within, expected=want, got=got,
                 expected_text=expected_text, got_text=_decoded(decode, got))


def classify(calls: Sequence[CallIds], *, decode: Decode | None = None,
             vocab_size: int | None = None) -> list[CallCheck]:
    """Every call against the last earlier call with ids and an answer."""
    out: list[CallCheck] = []
    base: CallIds | None = None
    for call in calls:
        problems = length_problems(call, vocab_size)
        common: dict[str, Any] = {
            "call_id": call.call_id, "turn": call.turn, "status": call.status, "problems": problems,
            "prompt_ids": None if call.prompt_ids is None else len(call.prompt_ids),
            "sampled_ids": None if call.sampled_ids is None else len(call.sampled_ids)}
        answered = call.status in KEPT_STATUSES or call.status == Status.TRUNCATED.value
        if call.prompt_ids is None or (answered and call.sampled_ids is None):
            out.append(CallCheck(token_class=TokenClass.ABSENT, **common))
            continue
        check = _against(call, base, decode, common)
        out.append(check)
        if call.sampled_ids is not None:
            base = call
    return out


def _against(call: CallIds, base: CallIds | None, decode: Decode | None, common: dict[str, Any]) -> CallCheck:
    prompt = call.prompt_ids or ()
    if base is None:
        return CallCheck(token_class=TokenClass.CLEAN, **common)
    base_prompt, sampled = base.prompt_ids or (), base.sampled_ids or ()
    split = len(base_prompt)
    if prompt[:split] == base_prompt and prompt[split: split + len(sampled)] == sampled:
        # The common case, without building the expected sequence.
        return CallCheck(token_class=TokenClass.CLEAN, against=base.call_id, **common)
    expected = base_prompt + sampled
    position = first_difference(prompt, expected)
    if position >= len(expected):
        return CallCheck(token_class=TokenClass.CLEAN, against=base.call_id, **common)
    if base.status not in KEPT_STATUSES and position >= len(base_prompt):
        # The answer was quarantined, not released: the loop asked again from its prompt.
        return CallCheck(token_class=TokenClass.CLEAN, against=base.call_id, retry_of=base.call_id, **common)
    drift = _drift(call, base, expected, position, decode)
    tail = len(expected) - position
    if drift.within == "sampled" and tail <= REALIGN_TAIL and len(prompt) > position:
        return CallCheck(token_class=TokenClass.REALIGN, against=base.call_id, drift=drift, **common)
    return CallCheck(token_class=TokenClass.FORK, against=base.call_id, drift=drift, **common)


def check_envelopes(run_id: str, calls: Sequence[tuple[str, int | None, Envelope]], *,
                    decode: Decode | None = None, vocab_size: int | None = None) -> RunTokens:
    """The drift check of a run's answered calls, in call order."""
    read = [call_ids(call_id, turn, envelope) for call_id, turn, envelope in calls]
    return RunTokens(run_id=run_id, calls=tuple(classify(read, decode=decode, vocab_size=vocab_size)))


def answered_calls(trajectory: Trajectory) -> list[CallView]:
    """A run's answered calls, in call order."""
    return sorted((c for record in trajectory.turns for c in record.calls if c.response is not None),
                  key=lambda c: c.seq)


def check_trajectory(trajectory: Trajectory, *, decode: Decode | None = None,
                     vocab_size: int | None = None) -> RunTokens:
    return check_envelopes(trajectory.run.id, [(c.id, c.turn, c.response.envelope())
                                               for c in answered_calls(trajectory) if c.response is not None],
                           decode=decode, vocab_size=vocab_size)
