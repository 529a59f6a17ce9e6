"""``escrow show RUN`` on screen: the run's header, then each turn through the
same blocks the live display prints, with the store's call details under
``--full``."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from cli.display.render import model_block, tool_block
from cli.display.steps import steps_of
from orchestrator.trajectory import Trajectory
from store.render import in_flight_lines, trajectory_header, turn_lines


def print_trajectory(console: Console, trajectory: Trajectory, *, full: bool = False) -> None:
    for line in trajectory_header(trajectory):
        console.print(Text(line), highlight=False)
    for record in trajectory.turns:
        console.print()
        if record.committed is None:
            state = "events only" if not record.calls else "not committed (in flight when the run stopped)"
            console.print(Text(f"turn {record.turn}: {state}", style="yellow"))
            for line in in_flight_lines(record):
                console.print(Text(line, style="yellow"), highlight=False)
        models, tools = steps_of(record)
        for step in models:
            console.print(model_block(step, full=full))
        for tool in tools:
            console.print(tool_block(tool, full=full))
        if full:
            for line in turn_lines(record)[
                2 + len(in_flight_lines(record)) :
            ]:  # past the heading and the in-flight lines
                console.print(Text(line, style="dim"), highlight=False)
