"""Escrow's orchestrator: the model-invocation contract, context assembly and the turn loop."""

from orchestrator.contract import Message, ModelRequest, Sampling, ToolCall, ToolSpec
from orchestrator.envelope import Attempt, Envelope, ErrorDetail, Payload, Status, Timings, Usage
from orchestrator.errors import (
    BudgetExhausted,
    ConfigError,
    ContractError,
    EscrowError,
    QuarantinedPayloadError,
    TokenizerError,
)
from orchestrator.escrow import release_from_escrow

__version__ = "0.1.0"

__all__ = [
    "Attempt", "BudgetExhausted", "ConfigError", "ContractError", "Envelope", "ErrorDetail",
    "EscrowError", "Message", "ModelRequest", "Payload", "QuarantinedPayloadError", "Sampling",
    "Status", "Timings", "TokenizerError", "ToolCall", "ToolSpec", "Usage", "release_from_escrow",
    "__version__",
]
