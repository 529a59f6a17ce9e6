"""The exact text fed back to the model after each turn. Deterministic by
construction (no clocks, no ids of our own), so replay rebuilds it byte for byte."""

from __future__ import annotations

from orchestrator.contract import Message
from orchestrator.envelope import Envelope
from orchestrator.ports import ToolOutcome


def perimeter_rejection(layer: str, error: str) -> ToolOutcome:
    return ToolOutcome(observation=f"error ({layer} check): {error}", ok=False, layer=layer)


def no_tool_call() -> Message:
    return Message(
        role="user",
        content="No tool call was made. Use the tools to work on the task, and call submit to run the verifier; "
        "saying the task is done is not enough.",
    )


def truncation_notice(envelope: Envelope) -> Message:
    return Message(
        role="user",
        content=f"Your previous answer was cut off at the output limit ({envelope.usage.completion_tokens} tokens) "
        "and was discarded without running anything. Answer again, shorter: one tool call at a time.",
    )


def stream_rejection(envelope: Envelope) -> Message:
    why = envelope.error.message if envelope.error else "the output violated the tool-call protocol"
    return Message(
        role="user",
        content=f"Your previous answer was rejected while streaming and nothing was run: {why}. "
        "Tool-call arguments must be one valid JSON object.",
    )
