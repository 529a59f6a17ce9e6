"""Reports and exports read from a Store: one run's cost lines, aggregates over
runs in a time window, and JSONL exports for training and audit."""

from store.reports.aggregate_query import query_plans, report_runs
from store.reports.export import FORMATS, ExportError, conversation, event_lines, is_verified_pass, run_ids
from store.reports.run_report import call_figures, report_run, tool_figures, trajectory_cost

__all__ = [
    "FORMATS", "ExportError", "call_figures", "conversation", "event_lines", "is_verified_pass", "query_plans", "run_ids",
    "report_run", "report_runs", "tool_figures", "trajectory_cost",
]
