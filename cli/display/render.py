"""Steps to screen: rich blocks for a terminal, one plain line per event for
logs and pipes. The live display and ``escrow show`` both print through here.

Content from the model, the tools or the repo only ever reaches the screen as
``rich.text.Text`` built from ``printable(...)``: never as markup, never raw.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.text import Text

from cli.display.steps import ModelStep, ToolStep
from cli.display.table import figure
from orchestrator.contract import Frozen
from orchestrator.terminal_text import one_line, printable

TEXT_LINES = 6  # a turn's words once the turn is over, unless --full
REASONING_LINES = 3
OUTPUT_LINES = 4
DISCARDED = ("TRUNCATED", "REJECTED")  # answers the loop quarantines: shown, never run
DISCARDED_NOTE = "(answer discarded: nothing was run)"
_STATUS_STYLE = {"COMPLETED": "green", "TRUNCATED": "yellow", "REJECTED": "yellow", "CANCELED": "yellow"}


class Budget(Frozen):
    """Budgets used against their limits, for the footer."""

    turns: int
    max_turns: int
    tokens: int
    max_tokens: int | None = None
    cost_usd: float
    max_cost_usd: float | None = None
    elapsed_s: float
    max_wall_s: float | None = None
    tokens_per_s: float | None = None
    streaming: int = 0  # chunks of the reply streaming now, about one token each: not counted in ``tokens`` yet


def _collapsed(text: str, limit: int | None) -> tuple[list[str], int, list[str]]:
    """The first ``limit`` lines, how many are hidden, and the last line.
    One hidden line is shown instead of a marker as long; the last line is
    kept because that is where a test runner says ``1 passed``."""
    lines = printable(text.strip("\n")).splitlines()
    if limit is None or len(lines) <= limit + 1:
        return lines, 0, []
    return lines[:limit], len(lines) - limit - 1, lines[-1:]


def _indented(text: str, limit: int | None, style: str, prefix: str = "  ", *, crop: bool = False) -> list[Text]:
    """``crop``: each line cut at the screen's edge (an excerpt), not wrapped."""
    head, hidden, tail = _collapsed(text, limit)

    def line(text: str) -> Text:
        return Text(prefix + text, style=style, no_wrap=crop, overflow="ellipsis" if crop else None)

    out = [line(text) for text in head]
    if hidden:
        out.append(Text(f"{prefix}… {hidden} more line{'s' if hidden > 1 else ''}", style="dim"))
    return out + [line(text) for text in tail]


def model_heading(step: ModelStep) -> Text:
    heading = Text(f"turn {step.turn} ", style="bold")
    heading.append(step.status, style=_STATUS_STYLE.get(step.status, "red"))
    if step.cause:
        heading.append(f" ({one_line(step.cause, 200)})", style=_STATUS_STYLE.get(step.status, "red"))
    figures = token_figures(step)
    if step.seconds is not None:
        figures += f", {step.seconds:.1f}s"
    heading.append(f"  {figures}", style="dim")
    return heading


def token_figures(step: ModelStep) -> str:
    """``1,234 in, 56 out``; a count the server did not send reads absent, not 0."""
    if step.prompt_tokens is None and step.completion_tokens is None:
        return "tokens absent"
    return f"{figure(step.prompt_tokens)} in, {figure(step.completion_tokens)} out"


def model_block(step: ModelStep, *, full: bool = False) -> RenderableType:
    """The heading, reasoning (dim), the words, and a refusal if any."""
    parts: list[RenderableType] = [model_heading(step)]
    if step.reasoning:
        parts += _indented(step.reasoning, None if full else REASONING_LINES, "dim italic", "  ~ ")
    if step.text:
        parts += _indented(step.text, None if full else TEXT_LINES, "" if step.status == "COMPLETED" else "dim")
    if step.refusal and step.refusal != step.cause:
        parts += _indented(step.refusal, None if full else TEXT_LINES, "magenta")
    if step.status in DISCARDED:
        parts.append(Text(f"  {DISCARDED_NOTE}", style="yellow"))
    return Group(*parts)


def escrow_path(step: ToolStep) -> str:
    """``committed``, or ``rejected at policy``: where the candidate left escrow."""
    if step.state == "COMMITTED":
        return "committed"
    if step.state == "REJECTED":
        return f"rejected at {one_line(step.layer or '?', 40)}"
    return one_line(step.state.lower(), 40)


def acl(step: ToolStep) -> str:
    if step.decision is None:
        return ""
    return one_line(f"{step.decision} by {step.rule or '?'}", 160)


def result_figures(step: ToolStep) -> str:
    if step.state != "COMMITTED":
        return ""
    exit_code = "-" if step.exit_code is None else str(step.exit_code)
    duration = "-" if step.duration_s is None else f"{step.duration_s:.2f}s"
    return f"exit {exit_code}, {duration}, {_size(step.output_bytes)}"


class _CallLine:
    """The call, its result figures, then its escrow path and ACL rule: on one
    line when the screen is wide enough, else the path and rule on the next."""

    def __init__(self, step: ToolStep) -> None:
        committed = step.state == "COMMITTED"
        self.call = Text("  ")
        self.call.append("▸ " if committed else "✗ ", style="cyan" if committed else "red")
        self.call.append(one_line(step.summary, 100), style="bold")
        figures = result_figures(step)
        if figures:
            self.call.append(f"  {figures}", style="dim")
        self.path = Text(escrow_path(step), style="green" if committed else "red")
        if acl(step):
            self.path.append(f", {acl(step)}", style="dim" if committed else "red")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.call.cell_len + 2 + self.path.cell_len <= options.max_width:
            yield Text.assemble(self.call, "  ", self.path)
        else:
            yield self.call
            yield Text.assemble("    ", self.path)


def tool_block(step: ToolStep, *, full: bool = False) -> RenderableType:
    committed = step.state == "COMMITTED"
    parts: list[RenderableType] = [_CallLine(step)]
    if full and step.arguments:
        parts += _indented(step.arguments, None, "dim", "    args ")
    if not committed:
        parts += _indented(step.reason, None if full else 2, "red", "    ")
    elif step.observation:
        parts += _indented(step.observation, None if full else OUTPUT_LINES, "", "    │ ", crop=not full)
    return Group(*parts)


def budget_text(budget: Budget) -> Text:
    return Text(budget_line(budget), style="reverse")


def budget_line(b: Budget) -> str:
    parts = [
        f"turns {b.turns}/{b.max_turns}",
        f"tokens {b.tokens:,}" + (f" +~{b.streaming:,} streaming" if b.streaming else "")
        + ("" if b.max_tokens is None else f"/{b.max_tokens:,}"),
        f"${b.cost_usd:.4f}" + ("" if b.max_cost_usd is None else f"/${b.max_cost_usd:.2f}"),
        f"{_clock(b.elapsed_s)}" + ("" if b.max_wall_s is None else f"/{_clock(b.max_wall_s)}"),
    ]
    if b.tokens_per_s is not None:
        parts.append(f"{b.tokens_per_s:.0f} tok/s")
    return "budget: " + " · ".join(parts)


def model_line(step: ModelStep) -> str:
    """One plain line per model answer: status, cause, figures, the words."""
    head = f"turn {step.turn} {step.status}"
    if step.cause:
        head += f" ({one_line(step.cause, 160)})"
    head += f" [{token_figures(step)}]"
    if step.reasoning:
        head += f" thinking: {one_line(step.reasoning, 120)} |"
    if step.text:
        head += f" {one_line(step.text, 300)}"
    if step.status in DISCARDED:
        head += f" {DISCARDED_NOTE}"
    return head


def tool_line(step: ToolStep) -> str:
    line = f"  {one_line(step.summary, 100)}: {escrow_path(step)}"
    if acl(step):
        line += f", {acl(step)}"
    if step.state != "COMMITTED":
        return line + (f": {one_line(step.reason, 200)}" if step.reason else "")
    first = next((one_line(s, 120) for s in step.observation.splitlines() if s.strip()), "")
    return line + f"; {result_figures(step)}" + (f": {first}" if first else "")


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1024 * 1024 else f"{n / 1024 / 1024:.1f} MiB"


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"
