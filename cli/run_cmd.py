"""``escrow run``: a coding agent on a repo, recorded, sandboxed, verified."""

from __future__ import annotations

import json
import logging
import sys
import threading
from contextlib import nullcontext
from pathlib import Path

import structlog
import typer
from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from cli import run_options as ro
from cli.display.live import LiveScreen, PlainScreen, RunDisplay
from cli.display.whole import print_diff
from cli.logging_setup import configure_logging
from orchestrator.adapters.model_client.reach import require_model, require_reachable
from orchestrator.agent import Verdict
from orchestrator.canonical import bytes_fields
from orchestrator.composition.launch import RunOutcome, RunRequest, run_agent
from orchestrator.composition.launch.compose import wire
from orchestrator.costing.money import dollars
from orchestrator.envelope import Envelope
from orchestrator.exit_codes import ExitCode
from orchestrator.limits import Tally
from orchestrator.settings import load_settings
from orchestrator.terminal_text import one_line, printable
from sandbox.errors import ApplyRefused


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def run(
    task: str = typer.Argument(..., help="What the agent should do, in words."),
    repo: Path = typer.Option(
        ..., "--repo", help="The repository to work on (copied into the sandbox; never modified unless --apply)."
    ),
    verify: str = typer.Option(
        ..., "--verify", help='The verifier command run by submit, e.g. "python3 -m pytest -q". Only its pass counts.'
    ),
    model_url: str = typer.Option(None, "--model-url", help="OpenAI-compatible base URL ending in /v1."),
    model: str = ro.MODEL,
    policy: Path = typer.Option(
        None, "--policy", help="Capability policy file (TOML); default: the shipped safe policy."
    ),
    max_turns: int = ro.MAX_TURNS,
    budget_usd: float = typer.Option(None, "--budget-usd", min=0, help="Cost limit in dollars (overrides the policy)."),
    max_tokens: int = ro.MAX_TOKENS,
    context_window: int = ro.CONTEXT_WINDOW,
    temperature: float = typer.Option(None, "--temperature", min=0, help="Sampling temperature."),
    seed: int = typer.Option(None, "--seed", help="Sampling seed, where the server honours one."),
    logprobs: int = typer.Option(
        None, "--logprobs", min=0, max=20, help="Record per-token logprobs with the top K alternatives."
    ),
    tool_protocol: str = ro.TOOL_PROTOCOL,
    constrain: str = ro.CONSTRAIN,
    system_role: str = ro.SYSTEM_ROLE,
    tokenizer: str = ro.TOKENIZER,
    stream: bool = ro.STREAM,
    token_exact: bool = ro.TOKEN_EXACT,
    verify_early: bool = typer.Option(
        None, "--verify-early/--no-verify-early",
        help="Start the verifier's container while the agent works, so submit pays only the copy and the "
        "tests (the default; one more container per run)."),
    runtime: str = ro.RUNTIME,
    apply: bool = typer.Option(False, "--apply", help="Apply the patch to --repo when the verdict is PASS."),
    accept_suspect: bool = typer.Option(False, "--accept-suspect",
                                        help="With --apply, apply a SUSPECT patch too (its verifier passed)."),
    json_out: bool = typer.Option(False, "--json", help="Print the outcome as JSON on stdout."),
    plain: bool = typer.Option(False, "--plain", help="One line per event, even on a terminal."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the outcome."),
    log_json: bool = typer.Option(None, "--log-json", help="Structured logs as JSON lines on stderr."),
    config: Path = typer.Option(None, "--config", help="Config file (default: $ESCROW_HOME/config.toml)."),
) -> None:
    """Run the agent on TASK in a sandboxed copy of --repo; prints the verdict, the diff and the run id.

    In a pipe or a file, stdout is the patch alone, byte for byte (escrow run ... > fix.patch), and the
    verdict goes to stderr.

    Exit code: 0 when the verifier passed, 1 for any other verdict (SUSPECT included), 2 for a usage or
    set-up error, 77 when --apply refused the patch (flagged paths the policy's [apply] section does not
    allow, or a SUSPECT patch without --accept-suspect), 130 after Ctrl-C (the run is recorded CANCELED)."""
    settings = load_settings(
        config,
        model_url=model_url,
        model=model,
        policy=policy,
        max_turns=max_turns,
        budget_usd=budget_usd,
        max_output_tokens=max_tokens,
        context_window=context_window,
        temperature=temperature,
        seed=seed,
        logprobs=logprobs,
        tool_protocol=tool_protocol,
        constrain=constrain,
        system_role=system_role,
        tokenizer=tokenizer,
        log_json=log_json,
        stream=stream,
        sandbox_runtime=runtime,
        token_exact=token_exact,
        verify_early=verify_early,
    )
    configure_logging(json_lines=settings.log_json, level=logging.WARNING if quiet else logging.INFO)
    # One line and exit 2, before a sandbox starts or a run is recorded; the
    # URL parsed here is the run's (the composition does not parse it again).
    url = require_reachable(settings.model_url)
    settings = settings.model_copy(update={"model": require_model(url.url, settings.model)})
    request = RunRequest(task=task, repo=repo, verify=verify, apply=apply, accept_suspect=accept_suspect)
    err = Console(stderr=True)
    log = structlog.get_logger("escrow.run")
    screen = None
    if not quiet and not settings.log_json:
        screen = PlainScreen(err) if plain or not err.is_terminal else LiveScreen(err)

    def log_turn(turn: int, envelope: Envelope, tally: Tally) -> None:
        """Without a display, each turn is one log line (JSON with --log-json)."""
        usage = envelope.usage
        log.info("turn", turn=turn, status=envelope.status.value, prompt_tokens=usage.prompt_tokens,
                 completion_tokens=usage.completion_tokens, tokens_total=tally.tokens,
                 cost_usd=round(tally.cost_usd, 6), elapsed_s=round(tally.elapsed_s, 1))

    # Set by Ctrl-C alone (run_agent's SIGINT handler): the run ends CANCELED
    # and recorded, and the command exits 130 as every interrupted command does.
    interrupted = threading.Event()
    with screen if isinstance(screen, LiveScreen) else nullcontext(), wire(settings, request, url) as wiring:
        # The display is fed by its observer alone (the policy's limits are
        # the wired policy's); without a display, each turn is logged.
        display = RunDisplay(screen, wiring.policy.limits) if screen is not None else None
        outcome = run_agent(wiring, request, observer=display, progress=None if display else log_turn,
                            cancel=interrupted)
    result = outcome.result
    if json_out:
        # "patch" is the diff to read; "patch_base64" (only when it is not UTF-8) its exact bytes.
        exact = bytes_fields(outcome.patch_bytes)
        payload = {"run_id": outcome.run_id, **result.model_dump(mode="json"), "patch": outcome.patch,
                   **({"patch_base64": exact["base64"]} if "base64" in exact else {}),
                   "patch_files": list(outcome.patch_files), "applied": outcome.applied,
                   "skipped": [s.model_dump() for s in outcome.skipped],
                   "flagged": [f.model_dump() for f in outcome.flagged],
                   "apply_refused": outcome.apply_refused}
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    elif quiet:
        Console(soft_wrap=True).print(Text(
            f"{result.verdict.value}: {one_line(result.detail, 200)} (run {outcome.run_id})"), highlight=False)
    elif settings.log_json:
        log_outcome(Console(), outcome, log)
    else:
        print_outcome(Console(), outcome, err)
    if outcome.apply_refused and settings.log_json:
        log.error("apply_refused", run_id=outcome.run_id, reason=outcome.apply_refused)
    elif outcome.apply_refused:
        err.print(Text("--apply refused: ", style="bold red") + Text(printable(outcome.apply_refused)))
        raise typer.Exit(ApplyRefused.exit_code)
    if interrupted.is_set():
        raise typer.Exit(ExitCode.INTERRUPTED)
    raise typer.Exit(ExitCode.OK if result.verdict is Verdict.PASS else ExitCode.FINDING)


def log_outcome(out: Console, outcome: RunOutcome, log: structlog.typing.FilteringBoundLogger) -> None:
    """``--log-json``: the patch on stdout as ``print_outcome`` gives it, and
    the outcome as one structured event on stderr, the last of the run's JSON
    lines (no drawn panel: every stderr line is JSON)."""
    if outcome.patch_bytes:
        print_diff(out, outcome.patch_bytes, None if out.is_terminal else sys.stdout.buffer)
    result = outcome.result
    log.info("verdict", run_id=outcome.run_id, verdict=result.verdict.value, detail=result.detail,
             turns=result.turns, tokens=result.tokens, cost_usd=round(result.cost_usd, 6),
             patch_files=list(outcome.patch_files), applied=outcome.applied,
             skipped=[s.model_dump() for s in outcome.skipped], flagged=[f.model_dump() for f in outcome.flagged])


def print_outcome(out: Console, outcome: RunOutcome, notes: Console) -> None:
    """The diff, whole, then the verdict panel. On a terminal the diff is
    coloured with its controls escaped; in a pipe stdout gets the recorded
    patch byte for byte and nothing else, and the rest goes to ``notes``
    (stderr), so ``escrow run ... > fix.patch`` saves a patch that applies."""
    result = outcome.result
    piped = not out.is_terminal
    if not piped:
        notes = out
    if outcome.patch_bytes:
        print_diff(out, outcome.patch_bytes, sys.stdout.buffer if piped else None)
    else:
        notes.print("[dim](no changes)[/]")
    for item in outcome.skipped:
        notes.print(Text("not exported ", style="yellow") + Text(f"{printable(item.path)} — {printable(item.reason)}"))
    for flag in outcome.flagged:
        notes.print(Text("flagged ", style="bold red") + Text(f"{printable(flag.path)} — {flag.reason}"
                                                              + (f"; {flag.detail}" if flag.detail else "")))
    colour = "green" if result.verdict is Verdict.PASS else "yellow" if result.verdict is Verdict.SUSPECT else "red"
    body = Text(result.verdict.value, style=f"bold {colour}")
    body.append(f" — {printable(result.detail)}\n")
    body.append(f"turns {result.turns} · tokens {result.tokens:,} · {dollars(result.cost_usd)}"
                + (" · patch applied" if outcome.applied else ""))
    notes.print(Panel.fit(body, title=f"run {outcome.run_id}"))
