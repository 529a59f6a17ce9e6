"""``printable``, the one escaping function for the terminal, attacked at its
mechanism, and every renderer that shows model or tool content attacked
through it: the live screen (streamed words included), the plain lines,
``escrow show``'s blocks, the runs table and the error line."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from cli.display.live import PLAIN_HANG, LiveScreen, PlainScreen, RunDisplay
from cli.display.render import model_block, model_line, tool_block, tool_line
from cli.display.steps import ModelStep, ToolStep, args_summary
from orchestrator.candidate import CandidateState, Transition
from orchestrator.contract import ModelRequest, ToolCall
from orchestrator.envelope import Envelope, Payload, Status, Usage
from orchestrator.ports import ToolOutcome
from orchestrator.terminal_text import is_printable, one_line, printable
from policies.model import RunLimits
from store.read.run_list import clip
from tests.display.hostile import PAYLOADS, RAW_CONTROL_CHARS

ALL = "".join(PAYLOADS.values())


@pytest.mark.parametrize("name", PAYLOADS)
def test_each_attack_is_escaped_to_visible_text(name):
    shown = printable(PAYLOADS[name])
    assert is_printable(shown)
    assert not set(shown) & RAW_CONTROL_CHARS and "\r" not in shown
    assert "\\" in shown  # the control is still visible, as an escape


def test_escapes_name_the_character():
    assert printable("\x1b]0;t\x07") == "\\x1b]0;t\\x07"
    assert printable("a\rb") == "a\\rb" and printable("a\r\nb") == "a\nb"
    assert printable("\u009b") == "\\x9b" and printable("\u202e") == "\\u202e"
    assert printable("tab\tnew\nline") == "tab\tnew\nline"
    assert printable("tab\tnew\nline", newlines=False) == "tab\\tnew\\nline"
    assert printable("é ü 日本 🙂 ‍") == "é ü 日本 🙂 ‍"  # text, emoji and ZWJ stay text
    assert printable("\ud83d") == "\\ud83d"  # a lone surrogate cannot even be encoded


@given(st.text())
def test_nothing_a_terminal_acts_on_survives(text):
    shown = printable(text)
    assert is_printable(shown)
    assert not any(0x80 <= ord(c) <= 0x9f or (ord(c) < 0x20 and c not in "\n\t") or c == "\x7f" for c in shown)
    assert is_printable(one_line(text, 50)) and "\n" not in one_line(text, 50)


@given(
    st.text(
        alphabet=st.characters(
            blacklist_categories=("Cc", "Cs"),
            blacklist_characters="\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029",
        )
        | st.sampled_from("\n\t")
    )
)
def test_plain_text_is_untouched(text):
    assert printable(text) == text


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, color_system="truecolor", width=400, legacy_windows=False), out


_RICH_OWN = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # rich's SGR, cursor and erase codes


def assert_safe(raw: str, *, shown: tuple[str, ...] = ()) -> None:
    """No attack's raw bytes in ``raw``; each of ``shown`` appears escaped."""
    for name, payload in PAYLOADS.items():
        assert payload not in raw, name
    # Beyond whole payloads: after removing rich's own codes, no control is left at all.
    rest = _RICH_OWN.sub("", raw)
    assert not set(rest) & RAW_CONTROL_CHARS, sorted(set(rest) & RAW_CONTROL_CHARS)
    for payload in shown:
        assert printable(payload) in raw


def hostile_steps() -> tuple[ModelStep, ToolStep, ToolStep]:
    model = ModelStep(turn=0, status="TRUNCATED", cause=f"finish_length: {ALL}", text=ALL, reasoning=ALL, refusal=ALL)
    args = '{"command": "' + ALL.encode("unicode_escape").decode().replace('"', '\\"') + '"}'
    ran = ToolStep(turn=0, index=0, name="bash", arguments=args, state="COMMITTED", layer="policy", decision="allow",
                   rule=f"tools.allowed{ALL}", exit_code=0, duration_s=0.1, output_bytes=9, observation=ALL)
    denied = ToolStep(turn=0, index=1, name=f"read{ALL}", arguments=f"{{{ALL}", state="REJECTED", layer="parse",
                      reason=ALL)
    return model, ran, denied


@pytest.mark.parametrize("full", [False, True])
def test_show_blocks_escape_every_attack(full):
    console, out = _terminal()
    model, ran, denied = hostile_steps()
    for renderable in (model_block(model, full=full), tool_block(ran, full=full), tool_block(denied, full=full)):
        console.print(renderable)
    assert_safe(out.getvalue(), shown=tuple(PAYLOADS.values()) if full else ())


def test_plain_lines_escape_every_attack():
    model, ran, denied = hostile_steps()
    for line in (model_line(model), tool_line(ran), tool_line(denied), args_summary("bash", ran.arguments)):
        assert is_printable(line) and "\n" not in line
        assert_safe(line)


def _envelope(text: str) -> Envelope:
    return Envelope(status=Status.COMPLETED, payload=Payload(text=text, reasoning=text,
                    tool_calls=(ToolCall(id="c", name="bash", arguments="{}"),)), usage=Usage(prompt_tokens=3))


def _drive(display: RunDisplay) -> None:
    """A turn as the core reports it: streamed pieces, the envelope, a tool call."""
    display.request(0, ModelRequest(model="m", messages=({"role": "user", "content": "t"},), max_tokens=8))
    display.on_attempt(1)
    for payload in PAYLOADS.values():
        display.on_delta("reasoning", payload)
        display.on_delta("text", payload)
    display.envelope(0, _envelope(ALL), 0.0)
    display.candidate(0, "ref", 0, ToolCall(id="c", name="bash", arguments=f'{{"command": {ALL!r}}}'))
    display.transition("ref", Transition(candidate_index=0, from_state=CandidateState.VALIDATING,
                                         to_state=CandidateState.COMMITTED, layer="policy", reason=ALL))
    display.tool("ref", "bash", None, None, ToolOutcome(observation=ALL, ok=True, exit_code=0))


def test_live_screen_streams_and_prints_escaped():
    console, out = _terminal()
    screen = LiveScreen(console)
    display = RunDisplay(screen, RunLimits())
    with screen:
        _drive(display)
        display.on_delta("text", "STREAMED" + PAYLOADS["osc0 title"])
        screen.live.refresh()  # the live area, with the streamed words, drawn at least once
    raw = out.getvalue()
    assert_safe(raw)
    assert printable("STREAMED" + PAYLOADS["osc0 title"]) in raw


def test_plain_screen_escapes():
    console, out = _terminal()
    _drive(RunDisplay(PlainScreen(console), RunLimits()))
    assert_safe(out.getvalue())
    events = [line for line in out.getvalue().splitlines() if not line.startswith(PLAIN_HANG)]
    assert len(events) == 2  # one line for the answer, one for the tool call (and their continuations)


@pytest.mark.parametrize("width", [60, 80])
def test_plain_screen_folds_each_event_to_the_width(width: int) -> None:
    """In a pipe (``escrow run ... 2> log``) each event is one paragraph:
    its first line, then continuations indented, none wider than the width."""
    out = io.StringIO()
    words = "word " * 50  # within what a plain line keeps of the words (300 characters)
    PlainScreen(Console(file=out, width=width)).model(ModelStep(turn=3, status="COMPLETED", text=words))
    lines = out.getvalue().splitlines()
    assert len(lines) > 2 and all(len(line) <= width for line in lines)
    assert lines[0].startswith("turn 3 COMPLETED") and all(line.startswith(PLAIN_HANG) for line in lines[1:])
    assert " ".join(line.strip() for line in lines).count("word") == 50


def test_store_lines_escape():
    for payload in PAYLOADS.values():
        assert is_printable(clip(f"task {payload}", 200)) and printable(payload) in clip(payload, 200)


def test_show_to_a_pipe_folds_an_escaped_attack_without_splitting_an_escape():
    """``escrow show`` folds its lines to the width, a pipe's too (80): the
    folds undone give every escaped attack whole, and no escape is cut in two."""
    out = io.StringIO()
    console = Console(file=out, width=80)
    console.print(model_block(ModelStep(turn=0, status="COMPLETED", text=ALL), full=True))
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines)
    joined = "".join(line.strip() for line in lines[1:])
    for payload in PAYLOADS.values():
        assert printable(payload) in joined
    assert not any(re.search(r"\\(x[0-9a-f]?|u[0-9a-f]{0,3})?$", line) for line in lines)
