"""The live display says SUSPECT on the submit step that found it, first,
with its reasons; a plain passing submit reads as before."""

from __future__ import annotations

import io

from rich.console import Console

from cli.display.live import PlainScreen, RunDisplay
from orchestrator.candidate import CandidateState, Transition
from orchestrator.contract import ToolCall
from orchestrator.ports import ToolOutcome
from orchestrator.suspect import SuspectReason
from policies.model import RunLimits

ATEXIT = SuspectReason(code="atexit", path="calc.py", line=2, text="atexit handler: import atexit")


def shown(outcome: ToolOutcome) -> str:
    out = io.StringIO()
    display = RunDisplay(PlainScreen(Console(file=out, width=80)), RunLimits())
    display.candidate(0, "ref", 0, ToolCall(id="c", name="submit", arguments='{"summary": "done"}'))
    display.transition("ref", Transition(candidate_index=0, from_state=CandidateState.VALIDATING,
                                         to_state=CandidateState.COMMITTED, layer="policy", reason=""))
    display.tool("ref", "submit", None, None, outcome)
    return " ".join(out.getvalue().split())


def test_a_suspect_submit_says_so_with_its_reasons():
    text = shown(ToolOutcome(observation="verifier PASSED on the submitted patch", ok=True, exit_code=0,
                             verifier_passed=True, suspect=(ATEXIT,)))
    assert "SUSPECT: the verifier passed, but the patch touches its machinery: atexit calc.py:2" in text


def test_a_plain_pass_reads_as_before():
    text = shown(ToolOutcome(observation="verifier PASSED on the submitted patch", ok=True, exit_code=0,
                             verifier_passed=True))
    assert "SUSPECT" not in text and "verifier PASSED" in text
