"""Memory escrow: the quarantining invariant at the model boundary.

Only a COMPLETED envelope's payload may leave escrow for verification or
execution. Every other status is quarantined and raises with the envelope
attached, so the caller can route it to its recovery path.
"""

from __future__ import annotations

from orchestrator.envelope import Envelope, Payload, Status
from orchestrator.errors import EscrowError


class QuarantinedPayloadError(EscrowError):
    """Raised by ``release_from_escrow`` for any status other than COMPLETED.
    Here, not in orchestrator/errors.py, which the envelope's modules import."""

    def __init__(self, envelope: Envelope) -> None:
        super().__init__(
            f"payload quarantined: status {envelope.status.value}"
            + (f" ({envelope.error.message})" if envelope.error else ""),
            status=envelope.status.value,
        )
        self.envelope = envelope
        self.status = envelope.status


def release_from_escrow(envelope: Envelope) -> Payload:
    if envelope.status is not Status.COMPLETED:
        raise QuarantinedPayloadError(envelope)
    return envelope.payload
