"""Context assembly: segmented, prefix-stable prompts inside the S <= S_max - K_max budget.

The server-tokenizer names (``ServerTokenizer``, ``probe_server_tokenizer``,
``discover_context_window``, ``counter_for``) import httpx and load on first use.
"""

from orchestrator.context.accounting import (
    cache_saving_factor,
    prefill_tokens_ideal_cache,
    resent_tokens_no_cache,
)
from orchestrator.context.assembler import Context, RenderedContext
from orchestrator.context.budget import Budget, Margin, resolve_budget
from orchestrator.context.calibration import CalibrationEvent, calibrate
from orchestrator.context.compaction import CompactionEvent, CompactionPolicy
from orchestrator.context.counting import MessageCounter, TemplateOverhead
from orchestrator.context.layout import ContextState, Entry, TailFormat
from orchestrator.context.prefix import PrefixReport, PromptBytes, TurnPrefix, prefix_report
from orchestrator.context.tokenizer import (
    RecordingCounter,
    ReplayCounter,
    TiktokenCounter,
    TokenCounter,
    resolve_counter,
)

_SERVER_NAMES = {"ServerTokenizer", "probe_server_tokenizer", "discover_context_window", "counter_for"}


def __getattr__(name: str):
    if name in _SERVER_NAMES:
        from orchestrator.context import server_tokenizer

        return getattr(server_tokenizer, name)
    raise AttributeError(name)


__all__ = [
    "Budget", "CalibrationEvent", "CompactionEvent", "CompactionPolicy", "Context", "ContextState",
    "Entry", "Margin", "MessageCounter", "PrefixReport", "PromptBytes", "RecordingCounter", "RenderedContext", "ReplayCounter",
    "TailFormat", "TemplateOverhead", "TiktokenCounter", "TokenCounter", "TurnPrefix",
    "cache_saving_factor", "calibrate", "prefill_tokens_ideal_cache", "prefix_report",
    "resent_tokens_no_cache", "resolve_budget", "resolve_counter", *sorted(_SERVER_NAMES),
]
