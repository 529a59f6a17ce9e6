"""Escrow states of one candidate tool call, and the legal transitions.

STAGED -> VALIDATING -> COMMITTED | REJECTED. Nothing else is legal: a
candidate is never executed without passing through VALIDATING, and a
decision is final.
"""

from __future__ import annotations

from enum import Enum

from orchestrator.contract import Frozen, ToolCall
from orchestrator.errors import EscrowError


class CandidateState(str, Enum):
    STAGED = "STAGED"
    VALIDATING = "VALIDATING"
    COMMITTED = "COMMITTED"
    REJECTED = "REJECTED"


_LEGAL: dict[CandidateState, frozenset[CandidateState]] = {
    CandidateState.STAGED: frozenset({CandidateState.VALIDATING}),
    CandidateState.VALIDATING: frozenset({CandidateState.COMMITTED, CandidateState.REJECTED}),
    CandidateState.COMMITTED: frozenset(),
    CandidateState.REJECTED: frozenset(),
}


class IllegalTransition(EscrowError):
    """A transition the escrow state machine does not allow."""


class Transition(Frozen):
    candidate_index: int
    from_state: CandidateState | None
    to_state: CandidateState
    layer: str | None = None
    reason: str = ""


class Candidate(Frozen):
    index: int
    call: ToolCall
    state: CandidateState = CandidateState.STAGED

    def to(
        self, state: CandidateState, *, layer: str | None = None, reason: str = ""
    ) -> tuple["Candidate", Transition]:
        if state not in _LEGAL[self.state]:
            raise IllegalTransition(f"candidate {self.index}: {self.state.value} -> {state.value} is not allowed")
        moved = self.model_copy(update={"state": state})
        return moved, Transition(
            candidate_index=self.index, from_state=self.state, to_state=state, layer=layer, reason=reason
        )


def stage(index: int, call: ToolCall) -> tuple[Candidate, Transition]:
    candidate = Candidate(index=index, call=call)
    return candidate, Transition(
        candidate_index=index, from_state=None, to_state=CandidateState.STAGED, reason="released from model escrow"
    )
