"""Flat forms of the cost reports: rows of named cells for tables and CSV,
JSON-ready dicts, and the sentences that explain the cache comparison."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from orchestrator.costing.aggregate import AggregateReport, GroupStats
from orchestrator.costing.run_cost import CacheComparison, CostLine, RunCost


def usd(value: float) -> float:
    """Dollars to a nano-dollar, so sums print without float noise."""
    return round(value, 9)


def line_row(line: CostLine) -> dict[str, Any]:
    """A cost line's row; a figure no call gave (``CostLine.absent``) is
    None (JSON null, ``-`` in a table), and so is what is worked out from it."""
    row = _line_figures(line)
    gone = set(line.absent)
    if "cached_tokens" in gone or "prompt_tokens" in gone:
        gone |= {"prefilled_tokens", "cache_hit_ratio"}
    if "cost_usd" in gone:
        gone |= {"source_usd"}
    return {name: None if name in gone else value for name, value in row.items()}


def _line_figures(line: CostLine) -> dict[str, Any]:
    return {
        "turn": "total" if line.turn is None else line.turn,
        "calls": line.calls,
        "statuses": ",".join(sorted(set(line.statuses))),
        "prompt_tokens": line.prompt_tokens,
        "cached_tokens": line.cached_tokens,
        "prefilled_tokens": line.prefilled_tokens,
        "completion_tokens": line.completion_tokens,
        "resent_tokens": line.resent_tokens,
        "cache_hit_ratio": None if line.hit_ratio is None else round(line.hit_ratio, 4),
        "input_usd": usd(line.cost.input_usd),
        "cached_input_usd": usd(line.cost.cached_input_usd),
        "output_usd": usd(line.cost.output_usd),
        "gpu_usd": usd(line.cost.gpu_usd),
        "source_usd": usd(line.cost.source_usd),
        "cost_usd": usd(line.cost.total_usd),
        "gpu_s": round(line.gpu_s, 6),
        "wait_s": round(line.wait_s, 6),
        "ttft_s": None if line.ttft_s is None else round(line.ttft_s, 6),
        "decode_s": round(line.decode_s, 6),
        "tool_s": round(line.tool_s, 6),
        "tool_calls": line.tool_calls,
        "retries": line.retries,
    }


def line_rows(report: RunCost) -> list[dict[str, Any]]:
    return [line_row(line) for line in (*report.turns, report.total)]


def comparison_dict(c: CacheComparison) -> dict[str, Any]:
    return {
        **c.model_dump(),
        "saving_vs_no_cache": c.saving_vs_no_cache,
        "excess_over_ideal": c.excess_over_ideal,
    }


def comparison_lines(c: CacheComparison) -> list[str]:
    # A share of each reference, not "0.87x fewer": the sentence reads the
    # same way whichever side is larger.
    of_ideal = "" if c.excess_over_ideal is None else f"; prefilled is {c.excess_over_ideal:.2f} times that"
    if c.prefilled_tokens is None:
        actual = "Actually prefilled (prompt - cached): absent, as the server reported no cached count."
    else:
        of_no_cache = "" if not c.no_cache_tokens else f", {c.prefilled_tokens / c.no_cache_tokens:.0%} of that"
        actual = f"Actually prefilled (prompt - cached): {c.prefilled_tokens:,}{of_no_cache}."
    return [
        c.derivation + ".",
        f"Prompt tokens sent: {c.sent_tokens:,}; without a cache every one is prefilled: "
        f"N*S0 + delta*N(N-1)/2 = {c.no_cache_tokens:,}.",
        actual,
        f"An ideal prefix cache prefills S0 + (N-1)*delta = {c.ideal_cache_tokens:,}{of_ideal}.",
    ]


def run_json(report: RunCost) -> dict[str, Any]:
    return {
        "run_id": report.run_id, "model": report.model, "status": report.status, "verdict": report.verdict,
        "last_alive_at": report.last_alive_at,
        "price_version": report.price_version,
        "turns": [line_row(t) for t in report.turns],
        "total": line_row(report.total),
        "comparison": None if report.comparison is None else comparison_dict(report.comparison),
        "warnings": list(report.warnings),
        "engines": list(report.engines),
        "constraint": report.constraint.model_dump(mode="json") if report.constraint else None,
        "sandbox_runtime": report.sandbox_runtime,
        "cached_clamps": [c.model_dump() for c in report.clamps],
        "source": report.source,
        "cost_basis": report.cost_basis,
        "run_level": None if report.run_level is None else line_row(report.run_level),
        "source_totals": report.source_totals,
    }


def group_row(g: GroupStats, by: str) -> dict[str, Any]:
    return {
        by: g.key,
        "runs": g.runs,
        "calls": g.calls,
        "prompt_tokens": g.prompt_tokens,
        "cached_tokens": g.cached_tokens,
        "cached_calls": g.cached_calls,
        "prefilled_tokens": g.prefilled_tokens,
        "completion_tokens": g.completion_tokens,
        "cache_hit_ratio": None if g.hit_ratio is None else round(g.hit_ratio, 4),
        "cost_usd": p_usd(g.cost_usd),
        "gpu_usd": None if g.cost_usd is None else usd(g.cost.gpu_usd),
        "source_usd": None if g.cost_usd is None else usd(g.cost.source_usd),
        "cost_per_run_p50": p_usd(g.cost_per_run.p50),
        "cost_per_run_p95": p_usd(g.cost_per_run.p95),
        "tokens_per_run_p50": g.tokens_per_run.p50,
        "tokens_per_run_p95": g.tokens_per_run.p95,
        "ttft_s_p50": g.ttft_s.p50,
        "ttft_s_p95": g.ttft_s.p95,
        "gpu_s": round(g.gpu_s, 6),
        "wait_s": round(g.wait_s, 6),
        "decode_s": round(g.decode_s, 6),
        "tool_s": round(g.tool_s, 6),
        "retries": g.retries,
    }


def p_usd(value: float | None) -> float | None:
    return None if value is None else usd(value)


def aggregate_rows(report: AggregateReport) -> list[dict[str, Any]]:
    groups = [*report.groups, *([report.total] if report.total else [])]
    return [group_row(g, report.by) for g in groups]


def aggregate_json(report: AggregateReport) -> dict[str, Any]:
    return {
        "by": report.by, "since": report.since, "until": report.until, "price_version": report.price_version,
        "groups": [group_row(g, report.by) for g in report.groups],
        "total": None if report.total is None else group_row(report.total, report.by),
        "warnings": list(report.warnings), "include_replays": report.include_replays,
    }


def to_csv(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return ""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows([{k: "" if v is None else v for k, v in row.items()} for row in rows])
    return out.getvalue()
