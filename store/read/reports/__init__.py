"""Reports and exports read from a Store: the figures one run's cost lines and
the aggregates over runs are computed from (priced by
``orchestrator.composition.launch.reports``), and JSONL exports for training and audit."""

from store.read.reports.aggregate_query import read_slices
from store.read.reports.export import FORMATS, ExportError, conversation, event_lines, is_verified_pass, run_ids
from store.read.reports.query_plans import query_plans
from store.read.reports.run_report import call_figures, constraint_of, engines_of, run_level_of, source_of, tool_figures

__all__ = [
    "FORMATS",
    "ExportError",
    "call_figures",
    "constraint_of",
    "conversation",
    "event_lines",
    "is_verified_pass",
    "query_plans",
    "run_ids",
    "read_slices",
    "engines_of",
    "run_level_of",
    "source_of",
    "tool_figures",
]
