"""The live footer counts the reply streaming now (issue 27: it read
``tokens 0/200,000 · 8 tok/s`` while a reply streamed)."""

from __future__ import annotations

from cli.display.live import RunDisplay
from cli.display.render import Budget, budget_line
from orchestrator.envelope import Envelope, Status, Usage
from policies.model import RunLimits


class Footers:
    """A Screen that keeps the footers it is given."""

    def __init__(self) -> None:
        self.budgets: list[Budget] = []

    def budget(self, budget: Budget, *, turn_over: bool) -> None:
        self.budgets.append(budget)

    def model(self, step: object) -> None: ...

    def tool(self, step: object) -> None: ...

    def streaming(self, text: str, reasoning: str) -> None: ...

    def running(self, summary: str | None) -> None: ...


def test_streamed_chunks_show_in_the_footer_until_the_reply_is_counted() -> None:
    screen, now = Footers(), [0.0]
    display = RunDisplay(screen, RunLimits(max_tokens=200_000), clock=lambda: now[0])
    for n in range(3):
        now[0] += 0.5
        display.on_delta("text", f"word{n} ")
    line = budget_line(screen.budgets[-1])
    assert "tokens 0 +~3 streaming/200,000" in line and "tok/s" in line
    usage = Usage(prompt_tokens=100, completion_tokens=3, prompt_source="server", completion_source="server")
    display.envelope(0, Envelope(status=Status.COMPLETED, usage=usage), 0.0)
    assert "tokens 103/200,000" in budget_line(screen.budgets[-1]) and "streaming" not in budget_line(
        screen.budgets[-1])


def test_the_footer_and_the_running_line_fit_80_columns_whole() -> None:
    """Issue 42, group 9: the footer of a long run streaming against its
    limits was 91 columns and the terminal wrapped it; it keeps every figure
    within the width, breaking only between figures."""
    from cli.display.render import budget_text, running_text

    budget = Budget(turns=12, max_turns=100, tokens=1_234_567, max_tokens=2_000_000, cost_usd=12.3456,
                    max_cost_usd=100.0, elapsed_s=3725.0, max_wall_s=7200.0, tokens_per_s=42.0, streaming=1_234)
    line = budget_line(budget)
    assert len(line) > 80  # what the footer was
    for width in (80, 40):
        shown = budget_text(budget, width).plain.splitlines()
        assert max(map(len, shown)) <= width, shown
        words = [w for w in " ".join(shown).split() if w != "·"]
        assert words == [w for w in line.removeprefix("budget: ").split() if w != "·"]  # every figure, none cut
        assert width == 40 or len(shown) == 2  # at 80, broken once, between figures
    assert budget_text(budget.model_copy(update={"streaming": 0, "tokens_per_s": None}), 120).plain == line.replace(
        " +~1,234 streaming", "").replace(" · 42 tok/s", "")
    running = running_text("bash: " + "python -m pytest -q tests/test_calc.py " * 4, 12.0, 80).plain
    assert len(running) <= 80 and running.endswith("running 12s")



class TurnFooters(Footers):
    """Footers, and which of them closed a turn."""

    def __init__(self) -> None:
        super().__init__()
        self.turn_over: list[bool] = []

    def budget(self, budget: Budget, *, turn_over: bool) -> None:
        super().budget(budget, turn_over=turn_over)
        self.turn_over.append(turn_over)


def test_the_turns_footer_comes_from_the_observer_alone() -> None:
    """Issue 44, point 4: the display has one channel, its observer; the end
    of a turn draws the turn's footer with the figures the loop's tally has."""
    from orchestrator.contract import Message, ModelRequest

    screen = TurnFooters()
    display = RunDisplay(screen, RunLimits(max_turns=30), clock=lambda: 0.0)
    usage = Usage(prompt_tokens=100, completion_tokens=3, prompt_source="server", completion_source="server")
    for turn in range(2):
        display.request(turn, ModelRequest(model="m", messages=(Message(role="user", content="hi"),), max_tokens=16))
        display.envelope(turn, Envelope(status=Status.COMPLETED, usage=usage), 0.25)
        display.end_turn(turn)
    assert screen.turn_over.count(True) == 2 and screen.turn_over[-1] is True
    last = screen.budgets[-1]
    assert (last.turns, last.tokens, last.cost_usd) == (2, 206, 0.5)
