"""What ``escrow run`` shows while the agent works.

``RunDisplay`` observes the run through the core's hooks (``StreamObserver``,
``JournalObserver``), its one channel, and turns it into steps; a
``Screen`` prints them: ``LiveScreen`` on a terminal (the words stream in a
live area above a budget footer, each finished step is printed for good), or
``PlainScreen`` (one line per event) off a terminal and with ``--plain``.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from pydantic import BaseModel
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from cli.display.render import (
    Budget,
    budget_line,
    budget_text,
    fold,
    model_block,
    model_line,
    running_text,
    tool_block,
    tool_line,
)
from cli.display.steps import ModelStep, ToolStep, args_summary, model_step, output_size
from orchestrator.candidate import Transition
from orchestrator.contract import ModelRequest, ToolCall
from orchestrator.envelope import Envelope
from orchestrator.ports import DecisionLike, ToolOutcome
from orchestrator.terminal_text import printable
from policies.model import RunLimits

STREAM_LINES = 6  # the live area shows the last lines of the words being written


class Screen(Protocol):
    def model(self, step: ModelStep) -> None: ...

    def tool(self, step: ToolStep) -> None: ...

    def budget(self, budget: Budget, *, turn_over: bool) -> None: ...

    def streaming(self, text: str, reasoning: str) -> None: ...

    def running(self, summary: str | None) -> None:
        """A committed tool call is executing (None: nothing is)."""
        ...


class RunDisplay:
    """The observer the core calls; keeps the current turn's state."""

    def __init__(self, screen: Screen, limits: RunLimits, clock=time.monotonic) -> None:
        self.screen, self.limits, self.clock = screen, limits, clock
        self.started = clock()
        self.turns = self.tokens = 0
        self.cost_usd = 0.0
        self.turn = 0
        self._reset_stream()
        self.candidates: dict[Any, tuple[int, ToolCall]] = {}
        self.last: dict[Any, Transition] = {}

    def _reset_stream(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.deltas = 0
        self.first_delta: float | None = None

    # StreamObserver
    def on_attempt(self, number: int) -> None:
        self._reset_stream()
        self._stream()

    def on_delta(self, kind: str, text: str) -> None:
        if self.first_delta is None:
            self.first_delta = self.clock()
        self.deltas += 1  # one streamed chunk is about one token
        if kind == "text":
            self.text.append(text)
        elif kind == "reasoning":
            self.reasoning.append(text)
        self._stream()

    def _stream(self) -> None:
        self.screen.streaming("".join(self.text), "".join(self.reasoning))
        self.screen.budget(self.budget(), turn_over=False)

    def budget(self) -> Budget:
        rate = None
        if self.first_delta is not None and self.deltas > 1:
            span = self.clock() - self.first_delta
            rate = (self.deltas - 1) / span if span > 0 else None
        lim = self.limits
        return Budget(
            turns=self.turns, max_turns=lim.max_turns, tokens=self.tokens, max_tokens=lim.max_tokens,
            cost_usd=self.cost_usd, max_cost_usd=lim.max_cost_usd, elapsed_s=self.clock() - self.started,
            max_wall_s=lim.max_wall_s, tokens_per_s=rate,
            streaming=self.deltas if self.first_delta is not None else 0,
        )

    # JournalObserver
    def request(self, turn: int, request: ModelRequest) -> None:
        self.turn = turn
        self.turns = max(self.turns, turn + 1)
        self._reset_stream()
        self._stream()

    def envelope(self, turn: int, envelope: Envelope, cost_usd: float) -> None:
        self.tokens += envelope.usage.prompt_tokens + envelope.usage.completion_tokens
        self.cost_usd += cost_usd
        self.first_delta = None
        self.screen.streaming("", "")
        self.screen.model(model_step(turn, envelope))
        self.screen.budget(self.budget(), turn_over=False)

    def candidate(self, turn: int, ref: Any, index: int, call: ToolCall) -> None:
        self.candidates[ref] = (index, call)

    def transition(self, ref: Any, transition: Transition) -> None:
        self.last[ref] = transition
        if transition.to_state.value == "COMMITTED" and ref in self.candidates:
            _, call = self.candidates[ref]
            self.screen.running(args_summary(call.name, call.arguments))

    def tool(
        self, ref: Any, name: str, args: BaseModel | None, decision: DecisionLike | None, outcome: ToolOutcome
    ) -> None:
        self.screen.running(None)
        index, call = self.candidates.pop(ref, (0, ToolCall(id="", name=name, arguments="")))
        last = self.last.pop(ref, None)
        self.screen.tool(ToolStep(
            turn=self.turn, index=index, name=name, arguments=call.arguments,
            state=last.to_state.value if last else "STAGED", layer=last.layer if last else None,
            reason=last.reason if last else "", decision=decision.effect if decision else None,
            rule=decision.rule if decision else None, exit_code=outcome.exit_code, duration_s=outcome.duration_s,
            output_bytes=_output_bytes(outcome), observation=_shown_observation(outcome),
        ))

    def event(self, turn: int | None, kind: str, data: dict[str, Any]) -> None:
        """Route, patch and verdict events show elsewhere (heading, diff, panel)."""

    def end_turn(self, turn: int) -> None:
        # Turns, tokens and cost are the loop's tally: counted from the same
        # requests and envelopes, in the same order.
        self.screen.budget(self.budget(), turn_over=True)


def _shown_observation(outcome: ToolOutcome) -> str:
    """A SUSPECT submit says so first (the model's observation is unchanged)."""
    if not outcome.suspect:
        return outcome.observation
    named = "; ".join(r.shown() for r in outcome.suspect[:3])
    more = f"; and {len(outcome.suspect) - 3} more" if len(outcome.suspect) > 3 else ""
    return f"SUSPECT: the verifier passed, but the patch touches its machinery: {named}{more}\n{outcome.observation}"


def _output_bytes(outcome: ToolOutcome) -> int:
    sizes = [stream.total_bytes for stream in (outcome.stdout, outcome.stderr) if stream is not None]
    return output_size(sum(sizes), outcome.observation)


PLAIN_HANG = "    "  # how a plain event's continuation lines start


class PlainScreen:
    """One readable line per event, for logs and pipes, folded to the
    console's width (80 in a pipe) with its continuations indented. No streaming."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def _line(self, text: str) -> None:
        for line in fold(Text(text), self.console.width, rest=PLAIN_HANG):
            self.console.print(line, soft_wrap=True, highlight=False)

    def model(self, step: ModelStep) -> None:
        self._line(model_line(step))

    def tool(self, step: ToolStep) -> None:
        self._line(tool_line(step))

    def budget(self, budget: Budget, *, turn_over: bool) -> None:
        if turn_over:
            self._line(budget_line(budget))

    def streaming(self, text: str, reasoning: str) -> None:
        pass

    def running(self, summary: str | None) -> None:
        pass


class LiveScreen:
    """A live area (the words as they stream, then the footer) under the
    printed steps. Use as a context manager around the run."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._text, self._reasoning = "", ""
        self._running: tuple[str, float] | None = None
        self._budget: Budget | None = None
        self._budget_at = 0.0
        self.live = Live(console=console, auto_refresh=True, refresh_per_second=8, transient=True,
                         get_renderable=self._renderable)

    def __enter__(self) -> "LiveScreen":
        self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.stop()
        if self._budget is not None:
            self.console.print(budget_text(self._budget.model_copy(update={"tokens_per_s": None, "streaming": 0}),
                                           self.console.width))

    def _renderable(self) -> RenderableType:
        parts: list[RenderableType] = []
        if self._reasoning:
            parts += [Text("  ~ " + line, style="dim italic") for line in _tail(self._reasoning, 2)]
        if self._text:
            parts += [Text("  " + line) for line in _tail(self._text, STREAM_LINES)]
        if self._running is not None:
            summary, since = self._running
            parts.append(running_text(summary, time.monotonic() - since, self.console.width))
        if self._budget is not None:
            budget, at = self._budget, self._budget_at
            parts.append(budget_text(budget.model_copy(update={"elapsed_s": budget.elapsed_s + time.monotonic() - at}),
                                     self.console.width))
        return Group(*parts)

    def model(self, step: ModelStep) -> None:
        self.console.print(model_block(step))

    def tool(self, step: ToolStep) -> None:
        self.console.print(tool_block(step))

    def budget(self, budget: Budget, *, turn_over: bool) -> None:
        self._budget, self._budget_at = budget, time.monotonic()  # the wall clock keeps running between events

    def streaming(self, text: str, reasoning: str) -> None:
        self._text, self._reasoning = text, reasoning

    def running(self, summary: str | None) -> None:
        self._running = None if summary is None else (summary, time.monotonic())


def _tail(text: str, lines: int) -> list[str]:
    return printable(text).splitlines()[-lines:]
