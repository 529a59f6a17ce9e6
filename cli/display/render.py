"""Steps to screen: rich blocks for a terminal, one plain line per event for
logs and pipes. The live display and ``escrow show`` both print through here.

Content from the model, the tools or the repo only ever reaches the screen as
``rich.text.Text`` built from ``printable(...)``: never as markup, never raw.
"""

from __future__ import annotations

import json
import re

from rich.cells import get_character_cell_size
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.text import Text

from cli.display.data import data_lines
from cli.display.steps import ModelStep, ToolStep
from cli.display.table import ABSENT, figure
from orchestrator.contract import Frozen
from orchestrator.costing.money import dollars
from orchestrator.terminal_text import one_line, printable

TEXT_LINES = 6  # a turn's words once the turn is over, unless --full
REASONING_LINES = 3
REASONING_LABEL = "reasoning (not fed back to the model):"
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


HANG = 2  # a folded line's continuations sit this much further in than its first


def _fits(plain: str, start: int, cells: int) -> int:
    """The end of the longest piece of ``plain`` from ``start`` within ``cells`` columns."""
    end, used = start, 0
    while end < len(plain):
        used += get_character_cell_size(plain[end])
        if used > cells:
            break
        end += 1
    return end


_ESCAPE = re.compile(r"\\(x[0-9a-f]{2}|u[0-9a-f]{4}|r)")  # as ``printable`` writes a control


def _outside_escape(plain: str, start: int, cut: int) -> int:
    """``cut`` moved back to the start of an escape it would split (``\\x1b``)."""
    for match in _ESCAPE.finditer(plain, max(start, cut - 6), cut + 6):
        if match.start() < cut < match.end() and match.start() > start:
            return match.start()
    return cut


def _word_after(plain: str, space: int) -> int:
    """The length of the word after the spaces at ``space``."""
    start = space
    while start < len(plain) and plain[start] == " ":
        start += 1
    end = plain.find(" ", start)
    return (len(plain) if end < 0 else end) - start


def fold(body: Text, width: int, first: Text | str = "", rest: Text | str | None = None) -> list[Text]:
    """``first`` + ``body`` in lines of at most ``width`` columns: the body
    broken at spaces, a word wider than the line broken where the line ends,
    each continuation led by ``rest`` (``first``'s width and ``HANG`` more
    spaces by default). Nothing is cut, and the styles travel with the text."""
    first = Text(first) if isinstance(first, str) else first
    rest = Text(" " * (first.cell_len + HANG)) if rest is None else Text(rest) if isinstance(rest, str) else rest
    if rest.cell_len > width // 2:  # a narrow screen: the lead gives way to the text
        rest = Text(" " * (width // 2))
    plain = body.plain
    out: list[Text] = []
    start, lead = 0, first
    while True:
        room = max(width - lead.cell_len, 1)
        end = _fits(plain, start, room)
        if end >= len(plain):
            out.append(Text.assemble(lead, body[start:]))
            break
        space = plain.rfind(" ", start, end + 1)
        cut = space if space > start and plain[start:space].strip() else max(end, start + 1)
        if cut == space and _word_after(plain, space) > width - rest.cell_len:
            cut = max(end, start + 1)  # a word no line holds is broken here, not a line further down
        if cut != space:
            cut = _outside_escape(plain, start, cut)
        out.append(Text.assemble(lead, body[start:cut]))
        start = cut
        while start < len(plain) and plain[start] == " ":
            start += 1
        if start >= len(plain):
            break
        lead = rest
    for line in out:
        line.rstrip()
    return out


class Folded:
    """One logical line, folded to the width it is printed at (``fold``)."""

    def __init__(self, body: Text, first: Text | str = "", rest: Text | str | None = None) -> None:
        self.body, self.first, self.rest = body, first, rest

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from fold(self.body, options.max_width, self.first, self.rest)


def _collapsed(text: str, limit: int | None) -> tuple[list[str], int, list[str]]:
    """The first ``limit`` lines, how many are hidden, and the last line.
    One hidden line is shown instead of a marker as long; the last line is
    kept because that is where a test runner says ``1 passed``."""
    lines = printable(text.strip("\n")).splitlines()
    if limit is None or len(lines) <= limit + 1:
        return lines, 0, []
    return lines[:limit], len(lines) - limit - 1, lines[-1:]


def _indented(text: str, limit: int | None, style: str, prefix: str = "  ") -> list[RenderableType]:
    """Each line of ``text`` after ``prefix``, folded to the screen's width
    (nothing cut), past ``limit`` lines collapsed with the count hidden."""
    head, hidden, tail = _collapsed(text.expandtabs(), limit)
    rest = prefix + " " * HANG if prefix.strip() else None  # a quote's bar runs down its folded lines

    def line(text: str) -> RenderableType:
        return Folded(Text(text, style=style), Text(prefix, style=style),
                      None if rest is None else Text(rest, style=style))

    out = [line(text) for text in head]
    if hidden:
        out.append(Text(f"{prefix}… {hidden} more line{'s' if hidden > 1 else ''}", style="dim"))
    return out + [line(text) for text in tail]


def model_heading(step: ModelStep, *, full: bool = False) -> Text:
    """``full``: the cause whole (a refusal may be said only there)."""
    heading = Text(f"turn {step.turn} ", style="bold")
    heading.append(step.status, style=_STATUS_STYLE.get(step.status, "red"))
    if step.cause:
        cause = one_line(step.cause, 10**12 if full else 200)
        heading.append(f" ({cause})", style=_STATUS_STYLE.get(step.status, "red"))
    heading.append(f"  {token_figures(step)}, {timed(step.seconds)}", style="dim")
    return heading


def seconds(value: float | None, places: int = 2) -> str:
    """``1.25s``; a time the record does not have reads ``-``, never 0s, and
    a time too short for ``places`` reads ``<0.01s``, not a false 0."""
    if value is None:
        return ABSENT
    if 0 < value < 0.5 / 10**places:
        return f"<{1 / 10**places:.{places}f}s"
    return f"{value:,.{places}f}s"


def timed(value: float | None, places: int = 2) -> str:
    """``1.25s``, or ``time -`` among other figures when the record has none."""
    return f"time {ABSENT}" if value is None else seconds(value, places)


def token_figures(step: ModelStep) -> str:
    """``1,234 in, 56 out``; a count the server did not send reads absent, not 0."""
    if step.prompt_tokens is None and step.completion_tokens is None:
        return "tokens absent"
    return f"{figure(step.prompt_tokens)} in, {figure(step.completion_tokens)} out"


def model_block(step: ModelStep, *, full: bool = False) -> RenderableType:
    """The heading, reasoning (dim), the words, and a refusal if any."""
    parts: list[RenderableType] = [Folded(model_heading(step, full=full))]
    if step.reasoning:
        parts.append(Text(f"  {REASONING_LABEL}", style="dim italic"))
        parts += _indented(step.reasoning, None if full else REASONING_LINES, "dim italic", "  ~ ")
    if step.text:
        parts += _indented(step.text, None if full else TEXT_LINES, "" if step.status == "COMPLETED" else "dim")
    if step.refusal and step.refusal != step.cause:
        parts += _indented(step.refusal, None if full else TEXT_LINES, "magenta")
    if step.status in DISCARDED:
        parts.append(Text(f"  {DISCARDED_NOTE}", style="yellow"))
    return Group(*parts)


SOURCE_EXECUTED = "executed by the source agent (imported: no escrow, no ACL decision made)"


def escrow_path(step: ToolStep) -> str:
    """``committed``, or ``rejected at policy``: where the candidate left
    escrow; an imported call never entered one."""
    if step.imported:
        return SOURCE_EXECUTED
    if step.state == "COMMITTED":
        return "committed"
    if step.state == "REJECTED":
        return f"rejected at {one_line(step.layer or '?', 40)}"
    return one_line(step.state.lower(), 40)


def acl(step: ToolStep) -> str:
    if step.decision is None:
        return ""
    return one_line(f"{step.decision} by {step.rule or '?'}", 160)


def ran(step: ToolStep) -> bool:
    """The call was run: committed here, or executed by the source agent."""
    return step.state == "COMMITTED" or step.imported


def result_figures(step: ToolStep) -> str:
    if not ran(step):
        return ""
    return f"exit {figure(step.exit_code)}, {timed(step.duration_s)}, {_size(step.output_bytes)}"


SUMMARY_CHARS = 200  # of a call's one-line summary, unless full


def summary_of(step: ToolStep) -> str:
    """The call in one line, cut past ``SUMMARY_CHARS`` with the count hidden."""
    flat = one_line(step.summary, 10**12)
    if len(flat) <= SUMMARY_CHARS:
        return flat
    return f"{flat[:SUMMARY_CHARS - 40]}… ({len(flat) - SUMMARY_CHARS + 40:,} more characters, --full shows them)"


class _CallLine:
    """The call, its result figures, then its escrow path and ACL rule: on one
    line when the screen is wide enough, else the figures, path and rule
    folded on the next. ``full``: the call's summary is not cut."""

    def __init__(self, step: ToolStep, *, full: bool = False) -> None:
        committed = ran(step)
        mark, colour = ("· ", "blue") if step.imported else ("▸ ", "cyan") if committed else ("✗ ", "red")
        self.mark = Text.assemble("  ", (mark, colour))
        # Under ``full`` the arguments follow whole, so the line names the tool alone.
        self.call = Text(one_line(step.name, 10**12) if full else summary_of(step), style="bold")
        self.figures = Text(result_figures(step), style="dim")
        self.path = Text(escrow_path(step), style="dim" if step.imported else "green" if committed else "red")
        if acl(step):
            self.path.append(f", {acl(step)}", style="dim" if committed else "red")

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        after = [part for part in (self.figures, self.path) if part.plain]
        whole = Text("  ").join([self.call, *after])
        if self.mark.cell_len + whole.cell_len <= width:
            yield Text.assemble(self.mark, whole)
            return
        yield from fold(self.call, width, self.mark)
        yield from fold(Text("  ").join(after), width, "    ")


def tool_block(step: ToolStep, *, full: bool = False) -> RenderableType:
    parts: list[RenderableType] = [_CallLine(step, full=full)]
    if full and step.arguments:
        parts += argument_lines(step.arguments)
    if not ran(step):
        parts += _indented(step.reason, None if full else 2, "red", "    ")
    elif step.observation:
        parts += _indented(step.observation, None if full else OUTPUT_LINES, "", "    │ ")
    return Group(*parts)


def argument_lines(arguments: str) -> list[Folded]:
    """A call's arguments whole: ``key: value`` lines, a value of several
    lines under its key; arguments that are not a JSON object, as they are."""
    try:
        parsed = json.loads(arguments)
    except (json.JSONDecodeError, RecursionError):
        parsed = None
    if not isinstance(parsed, dict):
        return [Folded(Text(line, style="dim"), "    args ")
                for line in printable(arguments).expandtabs().splitlines()]
    return [indented_line(line, "    ", "dim") for line in data_lines(parsed, full=True)]


_LABEL = re.compile(r" *[\w-]+: +(?=\S)")  # ``  task:    ``, ``    key: ``


def indented_line(line: str, prefix: str = "", style: str = "") -> Folded:
    """A line whose leading spaces say its depth, folded: a ``label: value``
    line's continuations under its value, any other's under its text."""
    label = _LABEL.match(line)
    depth = label.end() if label else len(line) - len(line.lstrip(" "))
    lead = prefix + line[:depth]
    rest = " " * len(lead) if label else None
    return Folded(Text(line[depth:], style=style), Text(lead, style=style), rest)


def budget_text(budget: Budget, width: int) -> Text:
    """The live footer within ``width`` columns, never left for the terminal
    to wrap: the ``budget:`` label gives way first, then the line breaks
    between its figures (a figure wider than the line folds at a space)."""
    line = budget_line(budget)
    if len(line) > width:
        line = line.removeprefix("budget: ")
    lines: list[str] = []
    for part in line.split(" · "):
        if lines and len(lines[-1]) + len(" · ") + len(part) <= width:
            lines[-1] += " · " + part
        else:
            lines += [piece.plain for piece in fold(Text(part), width, rest="")]
    return Text("\n".join(lines), style="reverse")


def running_text(summary: str, seconds: float, width: int) -> Text:
    """The live line of a tool call running now, within ``width`` columns
    (its summary shortened; the call's block prints it whole when it ends)."""
    tail = f"  running {seconds:.0f}s"
    return Text(f"  ▸ {one_line(summary, max(width - 4 - len(tail), 8))}{tail}", style="cyan")


def budget_line(b: Budget) -> str:
    parts = [
        f"turns {b.turns}/{b.max_turns}",
        f"tokens {b.tokens:,}" + (f" +~{b.streaming:,} streaming" if b.streaming else "")
        + ("" if b.max_tokens is None else f"/{b.max_tokens:,}"),
        dollars(b.cost_usd) + ("" if b.max_cost_usd is None else f"/{dollars(b.max_cost_usd)}"),
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
