"""The figures of a teacher's scores (``escrow score``), pure.

Per call, turn or run: the sampled tokens scored, the mean per-token reverse
KL estimate on them (student logprob - teacher logprob of the sampled token,
the single-sample estimate on-policy distillation minimises), and the share
of sampled tokens outside the teacher's top K. A figure nothing fed is
absent (None), never 0: a call whose student recorded no logprobs has no KL,
an engine that gave no top K no share.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from orchestrator.contract import Frozen
from orchestrator.envelope import Envelope
from orchestrator.logprobs import read_logprobs


class Figures(Frozen):
    tokens: int = 0
    kl_sum: float = 0.0
    kl_tokens: int = 0
    outside: int = 0
    ranked: int = 0

    @property
    def reverse_kl(self) -> float | None:
        return self.kl_sum / self.kl_tokens if self.kl_tokens else None

    @property
    def outside_share(self) -> float | None:
        return self.outside / self.ranked if self.ranked else None

    def __add__(self, other: "Figures") -> "Figures":
        return Figures(tokens=self.tokens + other.tokens, kl_sum=self.kl_sum + other.kl_sum,
                       kl_tokens=self.kl_tokens + other.kl_tokens, outside=self.outside + other.outside,
                       ranked=self.ranked + other.ranked)


def student_logprobs(envelope: Envelope) -> list[float] | None:
    """The student's own logprob of each sampled id, or None when it recorded
    none, or not one per sampled id (then nothing can be aligned)."""
    sampled = envelope.completion_token_ids or ()
    tokens = read_logprobs(envelope.logprobs)
    if not sampled or len(tokens) != len(sampled):
        return None
    if any(t.token_id is not None and t.token_id != i for t, i in zip(tokens, sampled, strict=True)):
        return None
    return [t.logprob for t in tokens]


def call_figures(student: Sequence[float] | None, teacher: Sequence[float | None],
                 in_top_k: Sequence[bool | None]) -> Figures:
    """One call's figures; a token either side gives no chance (-inf, None) has no KL term."""
    kl = [s - t for s, t in zip(student or (), teacher, strict=False)
          if t is not None and math.isfinite(s) and math.isfinite(t)]
    ranked = [flag for flag in in_top_k if flag is not None]
    return Figures(tokens=len(teacher), kl_sum=sum(kl), kl_tokens=len(kl),
                   outside=sum(1 for flag in ranked if not flag), ranked=len(ranked))


def total(figures: Iterable[Figures]) -> Figures:
    out = Figures()
    for f in figures:
        out = out + f
    return out
