"""A tool's output collapsed in the run display keeps its last line (issue
27: the verifier block hid ``1 passed`` behind ``… 1 more line``)."""

from __future__ import annotations

import io

from rich.console import Console

from cli.display.render import tool_block
from cli.display.steps import ToolStep


def shown(observation: str) -> list[str]:
    out = io.StringIO()
    step = ToolStep(turn=4, index=0, name="submit", arguments='{"summary": "fixed"}', state="COMMITTED",
                    exit_code=0, duration_s=2.0, output_bytes=98, observation=observation)
    Console(file=out, width=100, color_system=None).print(tool_block(step))
    return [line.rstrip() for line in out.getvalue().splitlines()]


def test_one_hidden_line_is_shown_instead_of_a_marker() -> None:
    lines = shown("verifier PASSED\nexit code 0\n[stdout 98 bytes]\n..\n2 passed in 0.05s")
    assert lines[-1] == "    │ 2 passed in 0.05s" and not any("more line" in line for line in lines)


def test_a_long_output_keeps_its_head_and_its_last_line() -> None:
    lines = shown("\n".join(f"line {n}" for n in range(10)) + "\n1 failed, 3 passed")
    assert [line for line in lines if "│" in line or "more" in line][-2:] == [
        "    │ … 6 more lines", "    │ 1 failed, 3 passed"]
    assert "    │ line 3" in lines and "    │ line 4" not in lines
