"""``escrow show RUN`` on screen: the run's header, then each turn through the
same blocks the live display prints, with the store's call details under
``--full``, then the run's patch."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.text import Text

from cli.display.record import in_flight_lines, trajectory_header, turn_lines
from cli.display.render import Folded, indented_line, model_block, tool_block
from cli.display.steps import steps_of
from cli.display.whole import diff_line, print_whole
from orchestrator.agent import SUBMIT_TOOL
from orchestrator.canonical import RecordedBytesError, recorded_bytes, sha256_hex, shown_text
from orchestrator.terminal_text import printable
from orchestrator.trajectory import Trajectory
from policies import Flag

PATCH_LINES = 40  # of the patch's diff, unless --full


def print_trajectory(console: Console, trajectory: Trajectory, *, full: bool = False,
                     also: tuple[str, ...] = ()) -> None:
    """Every line at most the console's width (prose folded at words, nothing
    cut under ``full``), but the patch's diff lines, printed whole. ``also``:
    header lines the trajectory does not hold (the batch attempt it was)."""
    header = trajectory_header(trajectory, full=full)
    for line in [*header[:1], *also, *header[1:]]:
        console.print(indented_line(line), highlight=False)
    print_turns(console, trajectory, full=full)


def print_turns(console: Console, trajectory: Trajectory, *, since: int = 0, full: bool = False) -> None:
    """The turns from ``since`` on, then the run's patch (a fork prints the
    turns it ran live and its result)."""
    for record in trajectory.turns:
        if record.turn < since:
            continue
        console.print()
        if record.committed is None:
            state = "events only" if not record.calls else "not committed (in flight when the run stopped)"
            console.print(Folded(Text(f"turn {record.turn}: {state}", style="yellow")))
            for line in in_flight_lines(record, full=full):
                console.print(indented_line(line, style="yellow"), highlight=False)
        models, tools = steps_of(record)
        for step in models:
            console.print(model_block(step, full=full))
        for tool in tools:
            console.print(tool_block(tool, full=full))
        if full:
            for line in turn_lines(record, full=full):
                console.print(indented_line(line, style="dim"), highlight=False)
    patch = next((e for e in reversed(trajectory.run_events) if e.kind == "patch"), None)
    if patch is not None:
        console.print()
        notes, diff = patch_lines(patch.data, full=full, failed=verifier_failed(trajectory))
        for note in notes:
            console.print(Folded(note), highlight=False)
        print_whole(console, diff)  # a diff line is never wrapped or cut


_BINARY_SIZE = re.compile(r"(literal|delta) (\d+)")
_INDEX = re.compile(r"index ([0-9a-f]{12})[0-9a-f]*\.\.([0-9a-f]{12})[0-9a-f]*( \d+)?")


def short_index(line: str) -> str:
    """A diff's ``index`` line with its blob hashes cut to 12 digits, as git
    abbreviates them (two full hashes made it 95 columns); the exact patch
    is in ``show --json``."""
    found = _INDEX.fullmatch(line)
    return f"index {found[1]}..{found[2]}{found[3] or ''}" if found else line


def binary_described(lines: list[str]) -> list[str]:
    """The diff's lines with each binary part (git's base85 blocks, which no
    one can read) replaced by what it is: new content or a delta, and its
    size. The exact bytes stay in the record (``show --json``)."""
    out: list[str] = []
    inside = False
    for line in lines:
        if line == "GIT binary patch":
            inside = True
            out.append("(binary content, shown as its size; show --json has the exact patch)")
        elif inside and line.startswith("diff --git "):
            inside = False
            out.append(line)
        elif inside:
            if size := _BINARY_SIZE.fullmatch(line):  # git gives the forward part, then the reverse one
                side = "before" if out[-1].startswith("  after") else "after"
                what = "whole content" if size[1] == "literal" else "a delta"
                out.append(f"  {side}: {what}, {int(size[2]):,} bytes")
        else:
            out.append(line)
    return out


def verifier_failed(trajectory: Trajectory) -> frozenset[str]:
    """The sha256 of each patch a submit put to the verifier and it failed."""
    failed: set[str] = set()
    for record in trajectory.turns:
        for execution in record.tool_executions:
            detail = json.loads(execution.detail_json) if execution.tool_name == SUBMIT_TOOL and \
                execution.detail_json else {}
            if isinstance(detail, dict) and detail.get("verifier_passed") is False \
                    and isinstance(detail.get("patch_sha256"), str):
                failed.add(detail["patch_sha256"])
    return frozenset(failed)


def patch_lines(record: Mapping[str, Any], *, full: bool = False,
                failed: frozenset[str] = frozenset()) -> tuple[list[Text], list[Text]]:
    """The recorded patch: a heading and its flags (prose), then its diff read from the exact bytes
    ``--apply`` would write (``recorded_bytes``), shown as text with each
    byte that is not UTF-8 as ``\\xNN`` and every terminal control escaped."""
    try:
        data = recorded_bytes(record)
    except RecordedBytesError as exc:
        return [Text(f"patch: unreadable record: {printable(str(exc))}", style="bold red")], []
    files = record.get("files") or []
    # A patch the verifier ran and failed is not "not verified" (``failed``: their sha256).
    state = ("verified" if record.get("verified") else
             "the verifier failed it" if record.get("sha256") in failed else "not verified")
    heading = Text(f"patch sha256 {str(record.get('sha256', ''))[:16]}, {len(files)} files, {state}", style="bold")
    if sha256_hex(data) != record.get("sha256"):
        heading.append(" (its bytes do not hash to the recorded sha256)", style="bold red")
    flags = [Text("flagged ", style="bold red") + Text(printable(f"{f.path} — {f.reason or 'needs a look'}"
                                                                   + (f"; {f.detail}" if f.detail else "")))
             for f in (Flag.from_recorded(item) for item in record.get("flagged") or ())]
    if not data:
        return [heading, *flags, Text("(no changes)", style="dim")], []
    lines = [short_index(line) for line in binary_described(printable(shown_text(data)).splitlines())]
    shown = lines if full or len(lines) <= PATCH_LINES else lines[:PATCH_LINES]
    out = [diff_line(line) for line in shown]
    if len(shown) < len(lines):
        out.append(Text(f"… {len(lines) - len(shown)} more lines (--full shows them)", style="dim"))
    return [heading, *flags], out
