"""``escrow parity``: re-send every recorded request of a run, unchanged, to
a live server and compare each answer with the recorded one."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console

from cli.display.table import prose, terminal_width, wrapped
from cli.store_cmd import open_store
from cli.store_options import CONFIG_HELP, DB_HELP, emit_json
from orchestrator.costing import NothingToReport
from orchestrator.errors import ConfigError
from orchestrator.exit_codes import ExitCode
from orchestrator.parity import CallParity, Comparison, RunParity, compare, summarize
from orchestrator.terminal_text import printable


def comparison_line(c: Comparison) -> str:
    d = c.divergence
    if c.verdict == "identical":
        return "identical"
    parts = [c.verdict.replace("_", "-")]
    if c.verdict == "status_changed":
        parts.append(f"{c.recorded_status.value} -> {c.replayed_status.value}")
    if d is not None:
        parts.append(f"first difference at {d.unit} {d.position}: {d.recorded!r} vs {d.replayed!r}")
    if c.tool_call_difference:
        parts.append(f"tool calls: {c.tool_call_difference}")
    return "; ".join(parts)


def recorded_engines(calls) -> tuple[str, ...]:
    return tuple(sorted({c.response.engine for c in calls if c.response is not None and c.response.engine}))


def report_text(report: RunParity, width: int) -> str:
    """The report in lines of at most ``width`` (a URL, a model's words in a
    first difference: folded at words, controls escaped)."""
    lines = prose(f"parity of run {report.run_id} ({', '.join(report.recorded_engines) or 'engine unknown'})"
                  f" against {report.model_url} ({report.engine})", width)
    for call in report.calls:
        noise = f"  noise {call.noise}/{call.repeats - 1}" if call.repeats > 1 else ""
        text = printable(f"turn {call.turn} call {call.call_id[:12]}  {comparison_line(call.comparison)}{noise}",
                         newlines=False)
        lines += ["  " + line for line in wrapped(text, width - 2, indent="    ")]
    counts = ", ".join(f"{n} {v.replace('_', '-')}" for v, n in report.verdicts.items() if n)
    lines += prose(f"{len(report.calls)} calls: {counts}; {report.noisy_calls} with engine noise across repeats",
                   width)
    return "\n".join(lines)


def parity(
    run: str = typer.Argument(..., help="Run id, or a unique prefix of one."),
    model_url: str = typer.Option(..., "--model-url", help="Base URL of the server to compare, ending in /v1."),
    repeat: int = typer.Option(
        1, "--repeat", min=1, max=100, help="Send each request N times to measure the engine's own noise."
    ),
    api_key: str | None = typer.Option(
        None, "--api-key", envvar="ESCROW_API_KEY", help="Bearer token for the server, if any."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Re-send every recorded request of RUN unchanged and compare each answer
    with the record: the first divergent token, and whether it is a near tie
    (each side's token in the other's top-k) or a real difference; also the
    tool calls that would be released, and the status. Exits 1 when any call
    differs for real (divergent or status changed), 0 otherwise."""
    from orchestrator.adapters.model_client.client import ModelClient

    with open_store(db, config) as store:
        trajectory = store.trajectory(run)
    calls = [c for record in trajectory.turns for c in record.calls if c.response is not None]
    if not calls:
        raise NothingToReport(f"run {trajectory.run.id} recorded no answered model call")
    err = Console(stderr=True, highlight=False)
    results: list[CallParity] = []
    with ModelClient(model_url, api_key=api_key) as client:
        engine = client.engine_info()
        if not engine.reachable:
            raise ConfigError(f"--model-url {model_url}: no server answered", model_url=model_url)
        for n, call in enumerate(calls, start=1):
            if call.response is None:  # filtered out above
                continue
            request, recorded = call.request(), call.response.envelope()
            started = time.monotonic()
            first = client.call(request)
            noise = sum(1 for _ in range(repeat - 1) if compare(first, client.call(request)).verdict != "identical")
            elapsed = time.monotonic() - started
            results.append(CallParity(call_id=call.id, turn=call.turn, comparison=compare(recorded, first),
                                      repeats=repeat, noise=noise, seconds=elapsed))
            if not as_json:
                err.print(f"[{n}/{len(calls)}] turn {call.turn}: {results[-1].comparison.verdict}")
    report = summarize(
        trajectory.run.id, model_url, results, engine=engine.label, recorded_engines=recorded_engines(calls)
    )
    if as_json:
        emit_json({**report.model_dump(mode="json"), "real_differences": report.real_differences})
    else:
        typer.echo(report_text(report, terminal_width()))
    if report.real_differences:
        raise typer.Exit(ExitCode.FINDING)


def register(app: typer.Typer) -> None:
    app.command("parity")(parity)
