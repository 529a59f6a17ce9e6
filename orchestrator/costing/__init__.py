"""Trajectory cost reports: per-turn and per-run cost lines, the prefix-cache
cache comparison, aggregates over many runs, and their flat and HTML forms.
Pure code: the store reads the figures (store.read.reports), the CLI prints."""

from orchestrator.costing.aggregate import AggregateReport, GroupStats, Spread, aggregate
from orchestrator.costing.figures import GROUP_BY, CallFigures, PriceLookup, RunSlice, ToolFigures, percentile
from orchestrator.costing.html import aggregate_html, run_html
from orchestrator.costing.run_cost import (
    CacheComparison,
    CachedClamp,
    CostLine,
    RunCost,
    cache_comparison,
    resent_per_call,
    run_cost,
)
from orchestrator.costing.tabular import aggregate_json, aggregate_rows, comparison_lines, line_rows, run_json, to_csv
from orchestrator.errors import NothingToReport, ReportError

__all__ = [
    "GROUP_BY", "AggregateReport", "CachedClamp", "CallFigures", "CacheComparison", "CostLine", "GroupStats",
    "NothingToReport",
    "PriceLookup", "ReportError", "RunCost", "RunSlice", "Spread", "ToolFigures", "aggregate", "aggregate_html",
    "aggregate_json", "aggregate_rows", "cache_comparison", "comparison_lines", "line_rows", "percentile",
    "resent_per_call", "run_cost", "run_html", "run_json", "to_csv",
]
