"""Typed replay errors. A ``Divergence`` is the replay's main finding, not a
crash: it says at which turn and which field today's loop stopped matching
the recording, with a readable diff."""

from __future__ import annotations

from typing import Any

from orchestrator.errors import EscrowError, LoopAbort
from orchestrator.exit_codes import ExitCode


class ReplayError(EscrowError):
    """A run cannot be replayed as asked."""


class RecordingUnusable(ReplayError):
    """The recorded run lacks what a replay needs (a spec this version reads,
    a policy), or was recorded by an incompatible Escrow."""


class ChainRefused(ReplayError):
    """The run's hash chain does not verify; replaying it would check today's
    loop against rows that may have been altered (override with --force)."""


class Divergence(ReplayError, LoopAbort):
    """Today's loop did something the recording did not.

    ``kind``: "request" (the built request's sha256 differs), "tool_call" (a
    different tool or arguments reached the sandbox), "acl" (the policy decides
    differently), "exhausted" (the loop wants a turn the recording lacks),
    "ending" (the run ends at another turn or with another verdict),
    "candidates" (the turn staged other tool calls than the recorded ones),
    "stored" (the recorded request's stored text does not match its own
    recorded sha256: the store was altered, and only ``--force`` replays it).
    Kind "ended" (``recording_ends``) is no divergence: a killed run's
    recording stops there.
    ``field`` is the first differing field path, e.g. ``messages[3].content``.
    """

    exit_code = ExitCode.FINDING

    def __init__(self, *, turn: int, kind: str, field: str, diff: str = "", fields: tuple[str, ...] = (),
                 recorded: Any = None, replayed: Any = None) -> None:
        super().__init__(f"diverged at turn {turn}: {kind} differs at {field}", turn=turn, kind=kind, field=field)
        self.turn = turn
        self.kind = kind
        self.field = field
        self.diff = diff
        self.fields = fields or (field,)
        self.recorded = recorded
        self.replayed = replayed


ENDED = "ended"
STORED = "stored"


def recording_ends(turn: int, what: str) -> Divergence:
    """Not a divergence: the recorded run died at ``turn`` and the loop wants
    more than was recorded. Replay stops there and says so."""
    return Divergence(turn=turn, kind=ENDED, field="turns",
                      diff=f"the recording ends at turn {turn} (the run died): {what}\n")
