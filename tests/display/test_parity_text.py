"""``escrow parity``'s report within 80 columns (issue 42, group 9): its
title names the run, the server's URL and both engines on one line (120
columns and more), and a first difference quotes the model's words; both
fold at words, nothing cut, controls escaped."""

from __future__ import annotations

from cli.parity_cmd import report_text
from orchestrator.envelope import Status
from orchestrator.parity import CallParity, Comparison, Divergence, summarize


def test_the_parity_report_folds_within_80_columns_and_keeps_every_word() -> None:
    words = "the recorded answer said this\x1b[31m and then went on for a long while " * 2
    differs = Comparison(verdict="divergent", recorded_status=Status.COMPLETED, replayed_status=Status.COMPLETED,
                         divergence=Divergence(position=4, unit="char", recorded=words, replayed="x"),
                         tool_calls_equal=True)
    changed = Comparison(verdict="status_changed", recorded_status=Status.COMPLETED, replayed_status=Status.FAULTED,
                         tool_calls_equal=False, tool_call_difference="1 calls became 0")
    report = summarize("86b6278a49ec4e4ab19e5350b32ddb48", "http://inference-gateway.example.internal:39585/v1",
                       [CallParity(call_id="01a2434cafdc" * 2, turn=0, comparison=differs),
                        CallParity(call_id="01a2434cb09b" * 2, turn=1, comparison=changed, repeats=3, noise=1)],
                       engine="llama.cpp b6510-703f9e32", recorded_engines=("llama.cpp b6510-703f9e32",))
    lines = report_text(report, 80).splitlines()
    assert max(map(len, lines)) <= 80, lines
    assert "\x1b" not in "".join(lines)
    text = " ".join(" ".join(lines).split())
    assert "against http://inference-gateway.example.internal:39585/v1 (llama.cpp b6510-703f9e32)" in text
    assert "status-changed; COMPLETED -> FAULTED; tool calls: 1 calls became 0 noise 1/2" in text
    first = next(n for n, line in enumerate(lines) if line.startswith("  turn 0 call 01a2434cafdc"))
    assert lines[first + 1].startswith("    ")  # its continuation, further in
