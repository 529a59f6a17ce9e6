"""What a person reads at 80 and 120 columns (issue 27): ``report RUN``,
``report --by model``, ``runs`` and ``batch report`` in a real tmux pane.
No captured line is longer than the terminal (the capture joins wrapped
lines, so a wrapped line reads long) and no cell is cut: each figure of each
row is on screen whole, or its column is named as not shown."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from cli.display.table import figure
from cli.report_cmd import GROUP_COLUMNS, TURN_COLUMNS
from cli.runs_cmd import RUN_COLUMNS
from orchestrator.composition.batch.driver import BatchPlan, start_batch
from orchestrator.composition.batch.pool import PoolOptions
from orchestrator.composition.batch.tasks import load_task_file
from orchestrator.composition.launch.reports import report_run, report_runs
from orchestrator.costing import aggregate_rows, line_rows
from policies.price_table import load_price_table

ESCROW = Path(sys.executable).parent / "escrow"
LONG_TASK = "Fix the off-by-one in the pagination helper so that the last page is never empty, then run the tests."


@pytest.fixture
def recorded(scripted, home: Path, tmp_path: Path) -> dict[str, str]:
    run_id = scripted.record(scripted.GROWING)
    scripted.record([scripted.Turn(900, 0, 30, model="qwen2.5-coder-7b-instruct")], model="qwen2.5-coder-7b-instruct",
                    task=LONG_TASK, verdict="BUDGET_EXHAUSTED")
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text("".join(json.dumps({"id": f"task-{n}", "repo": str(tmp_path), "task": LONG_TASK,
                                             "verify": "true"}) + "\n" for n in range(3)))
    plan = BatchPlan(tasks_dir=str(tmp_path), model_urls=("http://127.0.0.1:1/v1",), options=PoolOptions(workers=1))
    return {"run": run_id, "batch": start_batch(scripted.store, load_task_file(task_file), plan)}


def captured(tmux, width: int, home: Path, *argv: str) -> list[str]:
    pane = tmux(width)
    pane.start([str(ESCROW), *argv], {"ESCROW_HOME": str(home)})
    screen = pane.wait_for("EXIT=", timeout=60)
    lines = screen.rstrip("\n").splitlines()
    exit_line = next(line for line in lines if line.startswith("EXIT="))
    assert exit_line == "EXIT=0", screen
    return lines[:lines.index(exit_line)]


def fits(lines: list[str], width: int, *, capped: str | None = None) -> None:
    """No line over ``width``, and nothing cut to an ellipsis but the
    ``capped`` column's cells (the task in ``runs``, capped at 3 lines)."""
    long = [line for line in lines if len(line) > width]
    assert not long, f"{len(long)} lines over {width} columns:\n" + "\n".join(long)
    at = lines[0].index(capped) if capped else None
    assert "…" not in "\n".join(line[:at] for line in lines)  # nothing is cut to an ellipsis


def named_as_not_shown(lines: list[str]) -> str:
    return " ".join(line for line in lines if line.startswith("not shown:") or line.startswith("  "))


def row_tokens(lines: list[str], key: str) -> list[str]:
    return [t for line in lines if line.split()[:1] == [key] for t in line.split()[1:]]


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("width", [80, 120])
def test_report_of_a_run(width: int, wide: bool, recorded, home: Path, store, tmux) -> None:
    lines = captured(tmux, width, home, "report", recorded["run"], *(["--wide"] if wide else []))
    fits(lines, width)
    headers = {h for line in lines if line.split()[:1] == ["turn"] for h in line.split()}
    rows = line_rows(report_run(store, recorded["run"], load_price_table(home)))
    for row in rows:
        shown = row_tokens(lines, str(row["turn"]))
        for column in TURN_COLUMNS[1:]:
            if column.header.split()[0] in headers:
                assert figure(row[column.key], column.kind) in shown, (column.header, row["turn"], shown)
            else:
                assert not wide and column.header in named_as_not_shown(lines)


@pytest.mark.parametrize("width", [80, 120])
def test_report_by_model(width: int, recorded, home: Path, store, tmux) -> None:
    lines = captured(tmux, width, home, "report", "--by", "model")
    fits(lines, width)
    report = report_runs(store, by="model", since=None, until=None, prices=load_price_table(home))
    rows = aggregate_rows(report)
    # A row a group (issue 42, group 7: three rows were turned on their side),
    # the cost on screen at 80 columns.
    head = next(line for line in lines if line.split()[:1] == ["model"])
    assert "$" in head.split(), lines
    at = next((n for n, line in enumerate(lines) if line.startswith("not shown:")), len(lines))
    left_out = " ".join(lines[at:])
    for r in rows:
        shown = row_tokens(lines, str(r["model"]))
        for column in GROUP_COLUMNS:
            if re.search(rf"(^|  ){re.escape(column.header)}(  |$)", head):
                assert figure(r[column.key], column.kind) in shown, (column.header, r["model"], shown)
            else:
                assert column.header in left_out, (column.header, lines)


@pytest.mark.parametrize("width", [80, 120])
def test_runs(width: int, recorded, home: Path, tmux) -> None:
    lines = captured(tmux, width, home, "runs")
    fits(lines, width, capped="task")
    text = " ".join(" ".join(line.split()) for line in lines)
    assert recorded["run"][:12] in text and "BUDGET_EXHAUSTED" in text and "PASS" in text
    if width >= 120:
        assert {"in", "cached", "out", "task"} <= set(lines[0].split())
    else:
        assert {"run", "started", "verdict", "turns", "$", "task"} <= set(lines[0].split())
        assert [c.header for c in RUN_COLUMNS if c.header not in lines[0].split()]
        assert "(--wide shows every column)" in " ".join(lines)
    # The task: at most 3 lines a run, a cut marked; whole under --wide.
    assert " ".join(LONG_TASK.split()).startswith(task_text(lines).removesuffix("…"))
    assert " ".join(LONG_TASK.split()) in task_text(captured(tmux, width, home, "runs", "--wide"))


def task_text(lines: list[str]) -> str:
    """The task cells' text of the listing's long-task run, joined."""
    head = max(n for n, line in enumerate(lines) if line.startswith("run ") and "task" in line.split())
    at = lines[head].index("task")  # under --wide, in the last of the stacked tables
    row = next(n for n, line in enumerate(lines) if n > head and line[at:].startswith(LONG_TASK.split()[0] + " "))
    cell = [lines[row][at:].strip()]
    for line in lines[row + 1:]:
        if line[:at].strip():
            break
        cell.append(line[at:].strip())
    return " ".join(cell)


@pytest.mark.parametrize("width", [80, 120])
def test_batch_report(width: int, recorded, home: Path, tmux) -> None:
    lines = captured(tmux, width, home, "batch", "report", recorded["batch"])
    fits(lines, width)
    header = next(line for line in lines if line.startswith("task "))
    assert {"outcome", "verdict", "$", "error"} <= set(header.split())
    for n in range(3):
        (row,) = [line for line in lines if line.startswith(f"task-{n} ")]
        assert row.split()[1:3] == ["not", "started"] and "0.0000" not in row  # no run: no cost, shown absent
