"""Routing on envelope status: one recovery action per status, never a
blanket retry. Pure; the loop looks the action up and carries it out.

| status            | action          | meaning                                                        |
|-------------------|-----------------|----------------------------------------------------------------|
| COMPLETED         | RELEASE         | release the payload from escrow into the verification perimeter |
| TRUNCATED         | COMPACT         | quarantine; compact or ask for a shorter answer; never resend   |
| REFUSED           | END             | end the trajectory and record the reason                       |
| TRANSPORT_FAILURE | STOP_TRANSPORT  | the client already retried with backoff; stop the run          |
| REJECTED          | FEEDBACK        | quarantine; feed a structured error observation to the model   |
| CANCELED          | EVICT           | evict the payload; the run ends as canceled                    |
| FAULTED           | STOP_FAULT      | stop the run and surface the engine fault                      |

TRANSPORT_FAILURE reaches the loop only after the client's bounded retries
(with backoff, jitter and Retry-After) are spent, so the loop does not retry
again: that would multiply the bound.
"""

from __future__ import annotations

from enum import Enum

from orchestrator.envelope import Status


class Action(str, Enum):
    RELEASE = "RELEASE"
    COMPACT = "COMPACT"
    END = "END"
    STOP_TRANSPORT = "STOP_TRANSPORT"
    FEEDBACK = "FEEDBACK"
    EVICT = "EVICT"
    STOP_FAULT = "STOP_FAULT"


ROUTES: dict[Status, Action] = {
    Status.COMPLETED: Action.RELEASE,
    Status.TRUNCATED: Action.COMPACT,
    Status.REFUSED: Action.END,
    Status.TRANSPORT_FAILURE: Action.STOP_TRANSPORT,
    Status.REJECTED: Action.FEEDBACK,
    Status.CANCELED: Action.EVICT,
    Status.FAULTED: Action.STOP_FAULT,
}


def route(status: Status) -> Action:
    return ROUTES[status]
