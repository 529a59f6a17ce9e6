"""``escrow tokens RUN``: the drift check of a recorded run, call by call."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cli.display.table import ABSENT, Column, render, terminal_width, wrapped
from cli.store_cmd import open_store
from cli.store_options import CONFIG_HELP, DB_HELP, emit_json
from orchestrator.errors import ConfigError
from orchestrator.exit_codes import ExitCode
from orchestrator.terminal_text import printable
from orchestrator.token_drift import CallCheck, RunTokens, TokenClass, answered_calls

if TYPE_CHECKING:
    from orchestrator.adapters.model_client.token_exact import Rebuilt

COLUMNS = (
    Column("n", "#", rank=0),
    Column("turn", "turn", rank=0),
    Column("class", "class", "text", rank=0),
    Column("prompt", "prompt ids"),
    Column("sampled", "sampled"),
    Column("at", "drift at"),
    Column("note", "note", "text", rank=2, flex=True),
)


def _note(check: CallCheck) -> str:
    if check.retry_of is not None:
        return "retry: the last answer was quarantined"
    if check.drift is not None:
        return f"in the last {check.drift.within}"
    if check.token_class is TokenClass.ABSENT:
        return "the engine gave no prompt ids" if check.prompt_ids is None else "the engine gave no sampled ids"
    return ""


def _folded(text: str, width: int) -> list[str]:
    """Decoded text has long words (a path, a run of symbols): cut them too, never past the width."""
    return textwrap.wrap(text, width, subsequent_indent="    ", drop_whitespace=False) or [""]


def report_text(report: RunTokens, width: int) -> str:
    rows = [{"n": n, "turn": c.turn, "class": c.token_class.value, "prompt": c.prompt_ids, "sampled": c.sampled_ids,
             "at": None if c.drift is None else c.drift.position, "note": _note(c)}
            for n, c in enumerate(report.calls, start=1)]
    lines = [f"tokens of run {report.run_id}", *render(COLUMNS, rows, width=width)]
    for n, check in enumerate(report.calls, start=1):
        drift = check.drift
        if drift is not None:
            lines.append(f"#{n} {check.token_class.value} at prompt position {drift.position}:")
            for side, ids, text in (("expected", drift.expected, drift.expected_text),
                                    ("got", drift.got, drift.got_text)):
                shown = ABSENT if text is None else repr(printable(text))
                lines += _folded(f"  {side}: {list(ids)} {shown}", width)
        for problem in check.problems:
            lines += wrapped(f"#{n} problem: {printable(problem)}", width, indent="    ")
    lines.append(report.summary())
    return "\n".join(lines)


def rebuilt_text(rebuilt: "tuple[Rebuilt, ...]", width: int) -> str:
    lines: list[str] = []
    for n, call in enumerate(rebuilt, start=1):
        if call.recorded is None:
            lines.append(f"#{n} rebuilt: - (no prompt ids recorded)")
        elif call.position is None:
            lines.append(f"#{n} rebuilt: the same {call.rebuilt} ids")
        else:
            lines += wrapped(f"#{n} rebuilt: differs at prompt position {call.position} ({call.recorded} ids "
                             f"recorded, {call.rebuilt} rebuilt)", width, indent="    ")
            for side, text in (("recorded", call.recorded_text), ("rebuilt", call.rebuilt_text)):
                lines += _folded(f"  {side}: {ABSENT if text is None else repr(printable(text))}", width)
    differ = sum(1 for r in rebuilt if r.position is not None)
    checked = sum(1 for r in rebuilt if r.recorded is not None)
    lines.append(f"{checked - differ} of {checked} prompts rebuilt the same")
    return "\n".join(lines)


def tokens(
    run: str = typer.Argument(..., help="Run id, or a unique prefix of one."),
    model_url: str | None = typer.Option(
        None, "--model-url",
        help="A server with the run's tokenizer (llama-server, vLLM): decodes the ids around each drift and checks "
             "ids against its vocabulary.",
    ),
    rebuild: bool = typer.Option(
        False, "--rebuild",
        help="With --model-url, replay a --token-exact run at the token level: rebuild each prompt's ids from the "
             "recording with the engine's template and tokenizer and name the first position that differs.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the check as JSON."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Classify each model call of RUN against the one before it: CLEAN (its
    prompt ids extend the last prompt and sampled ids), REALIGN (they differ
    only in the end-of-turn tokens), FORK (history rewritten) or ABSENT (no
    ids); check the ids against the call's usage and logprobs. Exits 1 when
    recorded ids contradict the run's own figures."""
    if rebuild and model_url is None:
        raise ConfigError("--rebuild needs --model-url: a server with the run's template and tokenizer")
    vocab_size: int | None = None
    rebuilt: "tuple[Rebuilt, ...] | None" = None
    with open_store(db, config) as store:
        run_id = store.run(run).id
        if model_url is None:
            report = store.run_tokens(run_id)
        else:
            from orchestrator.adapters.model_client.token_endpoints import EngineTokens
            from orchestrator.adapters.model_client.token_exact import rebuild_prompts

            with EngineTokens(model_url) as engine:
                engine.detokenize([])  # a server that cannot decode is an error now, not text missing later
                vocab_size = engine.vocab_size()
                report = store.run_tokens(run_id, decode=engine.detokenize, vocab_size=vocab_size)
                if rebuild:
                    rebuilt = rebuild_prompts(engine, [(c.id, c.turn, c.request(), c.response.envelope())
                                                       for c in answered_calls(store.trajectory(run_id))
                                                       if c.response is not None])
    if as_json:
        emit_json({**report.model_dump(mode="json"), "summary": report.summary(),
                   "counts": {k.value: report.count(k) for k in TokenClass}, "vocab_size": vocab_size,
                   **({} if rebuilt is None else {"rebuilt": [r.model_dump(mode="json") for r in rebuilt]})})
    else:
        typer.echo(report_text(report, terminal_width()))
        if rebuilt is not None:
            typer.echo(rebuilt_text(rebuilt, terminal_width()))
    if report.problems or (rebuilt is not None and any(r.position is not None for r in rebuilt)):
        raise typer.Exit(ExitCode.FINDING)


def register(app: typer.Typer) -> None:
    app.command("tokens")(tokens)
