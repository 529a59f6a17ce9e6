"""The one table renderer (cli/display/table.py): no line wider than the
width given, no cell cut, columns picked by rank (then priority) with the rest named, one layout
however few the rows, every column stacked under ``wide``, and the one
number format, absent written as absent."""

from __future__ import annotations

import pytest

from cli.display.table import ABSENT, CUT, Column, figure, render

COLUMNS = (
    Column("id", "id", "text", rank=0), Column("status", "status", "text"), Column("prompt", "prompt"),
    Column("cached", "cached"), Column("cost", "$", "usd"), Column("hit", "hit", "ratio"),
    Column("ttft", "ttft s", "seconds", rank=2), Column("gpu", "gpu s", "seconds", rank=3),
    Column("decode", "decode s", "seconds", rank=3), Column("tool", "tool s", "seconds", rank=3),
    Column("wait", "wait s", "seconds", rank=3), Column("retries", "retries", rank=3),
    Column("resent", "re-sent", rank=3), Column("prefilled", "prefilled", rank=2),
)


def row(n: int) -> dict[str, object]:
    return {"id": f"turn-{n}", "status": "COMPLETED" if n % 2 else "TRUNCATED", "prompt": 123_456 + n,
            "cached": None if n == 3 else 100_000 + n, "cost": 0.00774812 * n, "hit": 0.8123, "ttft": 1.23456 * n,
            "gpu": 12.5, "decode": 3.25, "tool": 0.5, "wait": 0.0, "retries": n, "resent": 99_999, "prefilled": 23_456}


ROWS = [row(n) for n in range(1, 9)]


def cells_of(r: dict[str, object]) -> dict[str, str]:
    return {c.key: figure(r[c.key], c.kind) for c in COLUMNS}


def row_tokens(lines: list[str], key: str) -> list[str]:
    """Every token after ``key`` on the lines that start with it (one per stacked table)."""
    return [t for line in lines if line.split()[:1] == [key] for t in line.split()[1:]]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_no_line_is_wider_than_the_width_and_shown_cells_are_whole(width: int) -> None:
    lines = render(COLUMNS, ROWS, width=width)
    assert max(map(len, lines)) <= width
    header = lines[0].split()
    left_out = " ".join(lines[lines.index(next(line for line in lines if line.startswith("not shown:"))):]) \
        if any(line.startswith("not shown:") for line in lines) else ""
    for r in ROWS:
        shown = row_tokens(lines, str(r["id"]))
        for c in COLUMNS[1:]:
            if c.header.split()[0] in header:
                assert figure(r[c.key], c.kind) in shown, (c.key, shown)
            else:
                assert c.header in left_out  # a column left out is named, never cut
    assert "…" not in "\n".join(lines)


def test_ranks_decide_what_fits_and_the_key_stays() -> None:
    lines = render(COLUMNS, ROWS, width=80)
    header = lines[0].split()
    assert header[0] == "id" and {"status", "prompt", "cached", "$", "hit"} <= set(header)
    assert "retries" not in header and "(--wide shows every column)" in " ".join(lines)


@pytest.mark.parametrize("width", [40, 80])
def test_wide_stacks_every_column_and_repeats_the_key(width: int) -> None:
    lines = render(COLUMNS, ROWS, width=width, wide=True)
    assert max(map(len, lines)) <= width
    headers = [line.split() for line in lines if line.startswith("id ")]
    assert len(headers) > 1 and all(h[0] == "id" for h in headers)
    assert not any(line.startswith("not shown:") for line in lines)
    for r in ROWS:
        expected = sorted(v for k, v in cells_of(r).items() if k != "id")
        assert sorted(row_tokens(lines, str(r["id"]))) == expected


def test_a_table_of_few_rows_keeps_the_layout_of_many() -> None:
    """Issue 42, group 7: a table of few groups was turned on its side (a
    row a field) while one of many was not; the same columns, one layout."""
    many = render(COLUMNS, ROWS, width=80)
    for few in (ROWS[:1], ROWS[:3]):
        lines = render(COLUMNS, few, width=80)
        assert lines[0] == many[0] and [line.split()[0] for line in lines[1:len(few) + 1]] == [
            str(r["id"]) for r in few]


def test_a_priority_column_is_kept_before_earlier_ones_of_its_rank() -> None:
    """Issue 42, group 7: at 80 columns ``report --by model`` left out ``$``
    for ``hit`` and ``cached`` (picked in order); a column of priority is
    picked first and still shown in its place."""
    def columns(priority: int) -> tuple[Column, ...]:
        return (Column("id", "model", "text", rank=0), Column("runs", "runs"), Column("prompt", "prompt"),
                Column("cached", "cached"), Column("hit", "hit", "ratio"),
                Column("cost", "$", "usd", priority=priority))
    rows = [{"id": "bedrock/us.amazon.nova-premier-v1:0", "runs": 3, "prompt": 1_234_567_890, "cached": 1_234_567_000,
             "hit": 0.99, "cost": 1234.5678}]
    assert "$" not in render(columns(0), rows, width=80)[0].split()  # what the report did
    lines = render(columns(1), rows, width=80)
    assert lines[0].split()[-1] == "$" and lines[1].split()[-1] == "1,234.5678"
    assert lines[-1].startswith("not shown: cached")  # a figure of less weight gives way


def test_a_flex_column_wraps_at_words_without_cutting_one() -> None:
    columns = (Column("id", "run", "text", rank=0), Column("n", "turns"),
               Column("task", "task", "text", flex=True))
    task = "Fix the bug in mean() in calc.py so that the tests pass, then explain the fix in one sentence."
    lines = render(columns, [{"id": "abc123", "n": 3, "task": task}], width=40)
    assert max(map(len, lines)) <= 40 and len(lines) > 2
    assert " ".join(line[len("abc123") + 9:].strip() for line in lines[1:]) == task


@pytest.mark.parametrize("width", [40, 80])
def test_a_word_wider_than_the_flex_column_is_broken_and_no_line_passes_the_width(width: int) -> None:
    columns = (Column("id", "run", "text", rank=0), Column("task", "task", "text", flex=True))
    path = "/Users/someone/Documents/24/git_sync/swe-agent-test-repo/tests/./missing_colon.py"
    task = f'File "{path}", line 4'
    lines = render(columns, [{"id": "abc123", "task": task}], width=width)
    assert max(map(len, lines)) <= width
    assert "".join(line[len("abc123") + 2:].strip() for line in lines[1:]).replace(" ", "") == task.replace(" ", "")
    broken = [line for line in lines[1:] if "/" in line and not line.rstrip().endswith(("/", '",'))]
    assert len(broken) <= 1  # the path breaks after a separator, its last piece the only one that does not


@pytest.mark.parametrize("max_lines", [1, 2, 3])
def test_a_capped_flex_column_keeps_its_lines_and_marks_the_cut(max_lines: int) -> None:
    columns = (Column("id", "run", "text", rank=0), Column("task", "task", "text", flex=True, max_lines=max_lines))
    task = " ".join(f"word{n}" for n in range(200))
    lines = render(columns, [{"id": "abc123", "task": task}, {"id": "def456", "task": "short"}], width=40)
    first = lines[1:1 + max_lines]
    assert max(map(len, lines)) <= 40 and lines[1 + max_lines].startswith("def456")
    assert first[-1].endswith(CUT) and not any(line.endswith(CUT) for line in first[:-1])
    shown = " ".join(line[len("abc123") + 2:].strip() for line in first).removesuffix(CUT)
    assert task.startswith(shown)
    whole = render(columns, [{"id": "abc123", "task": "fits in one"}], width=40)
    assert not any(CUT in line for line in whole)  # a cell that fits is never marked


def test_the_one_number_format() -> None:
    assert figure(None) == ABSENT and figure(None, "usd") == ABSENT
    assert figure(0, "usd") == "0.0000" and figure(0.00001, "usd") == "<0.0001" and figure(1.5, "usd") == "1.5000"
    assert figure(1141) == "1,141" and figure(2934.0) == "2,934"
    assert figure(0.8712, "ratio") == "87%" and figure(4.304, "seconds") == "4.30"
    assert figure("a\x1b]0;x\x07b", "text") == "a\\x1b]0;x\\x07b"  # controls escaped


def test_a_long_name_in_a_flex_column_breaks_after_a_hyphen() -> None:
    """A model's name wider than its column (``report --by model``) breaks
    after a ``-`` that fits, not inside a word."""
    columns = (Column("id", "model", "text", rank=0, flex=True), Column("n", "runs"))
    lines = render(columns, [{"id": "claude-3-5-sonnet-20241022", "n": 2}], width=24)
    assert [line.split() for line in lines[1:]] == [["claude-3-5-sonnet-", "2"], ["20241022"]]


def test_wide_keeps_a_third_of_the_width_for_a_flex_key() -> None:
    """Stacked under ``wide``, a group's name kept whole where it fits a third
    of the width (it was squeezed to 16 columns, a few letters a line)."""
    columns = (Column("id", "model", "text", rank=0, flex=True), *COLUMNS[1:])
    rows = [{**r, "id": "claude-3-5-sonnet-20241022"} for r in ROWS[:2]]
    lines = render(columns, rows, width=80, wide=True)
    assert max(map(len, lines)) <= 80
    assert not [line for line in lines if line.startswith("20241022")], lines
