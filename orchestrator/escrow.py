"""Memory escrow: the quarantining invariant at the model boundary.

Only a COMPLETED envelope's payload may leave escrow for verification or
execution. Every other status is quarantined and raises with the envelope
attached, so the caller can route it to its recovery path.
"""

from __future__ import annotations

from orchestrator.envelope import Envelope, Payload, Status
from orchestrator.errors import QuarantinedPayloadError


def release_from_escrow(envelope: Envelope) -> Payload:
    if envelope.status is not Status.COMPLETED:
        raise QuarantinedPayloadError(envelope)
    return envelope.payload
