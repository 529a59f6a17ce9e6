"""The model-client adapter: OpenAI-compatible HTTP, streamed, ending in one
status envelope. Engine and provider quirks live in one table, ``engines``;
the rest of Escrow sees only the ``Model`` port and the envelope."""

from orchestrator.adapters.model_client.client import ModelClient

__all__ = ["ModelClient"]
