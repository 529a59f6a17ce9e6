"""Typed errors. Every error carries the context a caller needs to act on it.

The tree::

    EscrowError
    ├── ConfigError              bad settings, policy or price file (user-facing)
    ├── QuarantinedPayloadError  a non-COMPLETED envelope was asked to leave escrow
    ├── ContractError            a request violates its own contract (e.g. S + K_max > S_max)
    ├── BudgetExhausted          a run limit (turns, tokens, cost, wall time) was reached
    ├── TokenizerError           no usable tokenizer
    ├── StoreError               defined in store/: unreadable, corrupt or newer store
    └── SandboxError             defined in sandbox/: no daemon, no image, exec failure

Model-call failures are *not* exceptions: the client turns every outcome into an
Envelope with a Status, so that the loop routes on data rather than on ``except``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.envelope import Envelope


class EscrowError(Exception):
    """Base of every error Escrow raises on purpose. ``exit_code`` is what the
    CLI exits with when this error reaches it."""

    exit_code = 2

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def __str__(self) -> str:
        return self.message


class LoopAbort(EscrowError):
    """Ends ``Agent.run`` itself instead of ending the run with a verdict: the
    caller handles it (a replay's divergence). Every other exception inside
    the loop is an INFRA_ERROR verdict."""


class ConfigError(EscrowError):
    """A configuration, policy or price file is invalid."""


class ContractError(EscrowError):
    """A request cannot be honoured as specified."""


class TokenizerError(EscrowError):
    """No tokenizer could count tokens for this model."""


class BudgetExhausted(EscrowError):
    """A run-level limit was reached; ``limit`` names which one."""

    def __init__(self, message: str, *, limit: str, **context: Any) -> None:
        super().__init__(message, limit=limit, **context)
        self.limit = limit


class QuarantinedPayloadError(EscrowError):
    """Raised by ``release_from_escrow`` for any status other than COMPLETED."""

    def __init__(self, envelope: "Envelope") -> None:
        super().__init__(
            f"payload quarantined: status {envelope.status.value}"
            + (f" ({envelope.error.message})" if envelope.error else ""),
            status=envelope.status.value,
        )
        self.envelope = envelope
        self.status = envelope.status
