"""The fault-injection model server: an OpenAI-compatible server on loopback
that plays scripted replies and faults, and records what it received."""

from orchestrator.adapters.fault_server.observed import Disconnect, RecordedRequest, StreamRecord
from orchestrator.adapters.fault_server.scenario import (
    Fault,
    Hangup,
    HttpError,
    Oversized,
    RawResponse,
    Reply,
    Scenario,
    Script,
    ScriptedToolCall,
    StreamFault,
)
from orchestrator.adapters.fault_server.server import FaultServer, FaultServerError

__all__ = [
    "Disconnect", "Fault", "FaultServer", "FaultServerError", "Hangup", "HttpError", "Oversized",
    "RawResponse", "RecordedRequest", "Reply", "Scenario", "Script", "ScriptedToolCall", "StreamFault",
    "StreamRecord",
]
