"""An imported run's reasoning (DeepSeek-reasoner's ``reasoning_content`` in
a real mini-swe-agent trajectory, imported with ``escrow import``) is part of
its transcript: in ``escrow show``, marked as reasoning and folded to 80
columns, and in the viewer's run page, HTML-escaped in its reasoning fold,
not only as an event under ``--full`` (issue 42, group 10)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import httpx
from typer.testing import CliRunner

from cli.display.render import REASONING_LABEL
from cli.main import app
from orchestrator.terminal_text import printable
from tests.interop.conftest import real
from tests.view.conftest import serving

SAMPLE = "mini-swe-agent/deepseek_reasoner_dev__pvlib__pvlib-python-1606.traj.json"


def reasonings(path: Path) -> list[str]:
    messages = json.loads(path.read_text())["messages"]
    return [m["reasoning_content"] for m in messages if m.get("role") == "assistant" and m.get("reasoning_content")]


def imported(tmp_path: Path) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 'escrow.db'}"
    result = CliRunner().invoke(app, ["import", str(real(SAMPLE)), "--json", "--db", url])
    assert result.exit_code == 0, result.output
    return url, json.loads(result.stdout)["run_ids"][0]


def test_show_prints_each_turn_s_imported_reasoning_marked_and_folded(tmp_path):
    url, run_id = imported(tmp_path)
    first = reasonings(real(SAMPLE))[0]
    result = CliRunner().invoke(app, ["show", run_id, "--full", "--db", url], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    turn = lines.index(next(line for line in lines if line.startswith("turn 1 ")))
    assert lines[turn + 1] == f"  {REASONING_LABEL}"
    shown = [line for line in lines[turn + 2:] if line.startswith("  ~ ")]
    # Folded, not cut: the reasoning's words are all there, each line within 80.
    words = " ".join(line[4:].strip() for line in shown).split()
    assert words[: len(first.split())] == printable(first).split()
    assert len(lines[turn + 2]) > 40 and all(len(line) <= 80 for line in lines)


def test_the_viewer_s_transcript_shows_imported_reasoning_escaped(tmp_path):
    url, run_id = imported(tmp_path)
    with serving(Path(url.removeprefix("sqlite:///"))) as base:
        page = httpx.get(f"{base}/run/{run_id}", timeout=60).text
    first = reasonings(real(SAMPLE))[0]
    assert "'" in first  # the escaping is exercised: shown as &#39;
    fold = page.split('<details class="reasoning"', 1)[1].split("</details>", 1)[0]
    assert "not fed back to the model" in fold
    pre = fold.split("<pre>", 1)[1].split("</pre>", 1)[0]
    assert "'" not in pre and html.unescape(pre) == first
