"""Context assembly: segmented, prefix-stable prompts inside the S <= S_max - K_max budget.

Pure: counting with the model server's own tokenizer needs HTTP, so that
counter lives with the model client (``orchestrator.adapters.model_client.server_tokenizer``)
and is handed in as a ``TokenCounter``.
"""

from orchestrator.context.accounting import (
    cache_saving_factor,
    prefill_tokens_ideal_cache,
    resent_tokens_no_cache,
)
from orchestrator.context.assembler import ContextAssembler, RenderedContext
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

__all__ = [
    "Budget",
    "CalibrationEvent",
    "CompactionEvent",
    "CompactionPolicy",
    "ContextAssembler",
    "ContextState",
    "Entry",
    "Margin",
    "MessageCounter",
    "PrefixReport",
    "PromptBytes",
    "RecordingCounter",
    "RenderedContext",
    "ReplayCounter",
    "TailFormat",
    "TemplateOverhead",
    "TiktokenCounter",
    "TokenCounter",
    "TurnPrefix",
    "cache_saving_factor",
    "calibrate",
    "prefill_tokens_ideal_cache",
    "prefix_report",
    "resent_tokens_no_cache",
    "resolve_budget",
    "resolve_counter",
]
