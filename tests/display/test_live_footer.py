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
