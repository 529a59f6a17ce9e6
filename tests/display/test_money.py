"""Issue 42, group 14: money read as $0.0000, $0.000000 and
6.1434999999999995 in three places. Every printed dollar figure comes from
orchestrator/costing/money.py: four places, <$0.0001 for a cost too small
for them, - when absent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli.display import record, table
from cli.display.data import scalar
from cli.display.render import Budget, budget_line
from cli.view import jinja_pages as viewer
from orchestrator.composition.batch.live_counts import BatchProgress
from orchestrator.costing.money import amount, dollars

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value,shown,bare", [
    (None, "-", "-"),
    (0.0, "$0.0000", "0.0000"),
    (0.00001, "<$0.0001", "<0.0001"),
    (6.1434999999999995, "$6.1435", "6.1435"),
    (1234.5, "$1,234.5000", "1,234.5000"),
    (-0.5, "-$0.5000", "-0.5000"),
])
def test_one_format_for_dollars(value, shown, bare):
    assert dollars(value) == shown and amount(value) == bare
    # The terminal's tables and records, the viewer and show's data read alike.
    assert table.figure(value, "usd") == bare and record.dollars(value) == viewer.dollars(value) == shown
    if value is not None:
        assert scalar("cost_usd", value) == scalar("accumulated_cost", value) == bare


def test_the_live_budget_line_and_batch_progress_use_it():
    line = budget_line(Budget(turns=1, max_turns=2, tokens=10, max_tokens=None, cost_usd=6.1434999999999995,
                              max_cost_usd=1.0, elapsed_s=1.0, max_wall_s=None))
    assert "$6.1435/$1.0000" in line
    assert "$0.0000" in BatchProgress(total=1).line(0)


# A dollar figure formatted in place: "${x:.4f}", f"{cost:.6f}", f"${figure(...)}".
IN_PLACE = re.compile(r"\$\{[^}]*:[,.\d]*f\}|\{[^}]*(?:usd|cost)[^}]*:[,.\d]*f\}|\$\{figure\(")


def test_no_dollar_figure_is_formatted_outside_its_home():
    found = [f"{path.relative_to(ROOT)}:{n}" for top in ("cli", "orchestrator", "store", "policies")
             for path in sorted((ROOT / top).rglob("*.py")) if path.name != "money.py"
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if IN_PLACE.search(line)]
    assert found == []
