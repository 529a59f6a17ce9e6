"""``escrow replay RUN``: offline replay (default), ``--reexecute`` and
``--fork-at N`` of a recorded run. Each replay is recorded as a run of its own
linked to its parent (``--no-record`` only checks)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cli.display.progress import StepProgress
from cli.display.table import prose, terminal_width
from cli.store_options import CONFIG_HELP, DB_HELP
from orchestrator.composition.launch.replay import ReplayMode, ReplayRequest, replay_run
from orchestrator.errors import ConfigError
from orchestrator.exit_codes import ExitCode
from orchestrator.replay import ForkOverrides, ReplayReport
from orchestrator.settings import load_settings
from orchestrator.terminal_text import printable

# Exit codes of `escrow replay`, from the one table (orchestrator.exit_codes).
EXIT_IDENTICAL = ExitCode.OK
EXIT_DIFFERS = ExitCode.FINDING
EXIT_RECORDING_ENDS = ExitCode.REPLAY_RECORDING_ENDS
EXIT_NOISE_ONLY = ExitCode.REPLAY_NOISE_ONLY


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)


def replay(
    run: str = typer.Argument(..., help="Run id, or a unique prefix of one."),
    reexecute: bool = typer.Option(
        False,
        "--reexecute",
        help="Recorded model outputs; tools re-run live in a fresh sandbox on the recorded repo; report drift.",
    ),
    fork_at: int = typer.Option(
        None, "--fork-at", min=0, help="Replay turns before N (tools live), then continue live as a new run."
    ),
    model_url: str = typer.Option(
        None, "--model-url", help="Fork: the live server's base URL (default: the recorded one)."
    ),
    model: str = typer.Option(None, "--model", help="Fork: model id from the fork turn on."),
    temperature: float = typer.Option(
        None, "--temperature", min=0, help="Fork: sampling temperature from the fork turn on."
    ),
    top_p: float = typer.Option(None, "--top-p", min=0, max=1, help="Fork: top_p from the fork turn on."),
    top_k: int = typer.Option(None, "--top-k", min=0, help="Fork: top_k from the fork turn on."),
    seed: int = typer.Option(None, "--seed", help="Fork: sampling seed from the fork turn on."),
    max_tokens: int = typer.Option(None, "--max-tokens", min=1,
                                   help="Fork: most output tokens per call from the fork turn on."),
    allow_drift: bool = typer.Option(
        False, "--allow-drift", help="Fork: continue even if the re-executed prefix differs from the parent's."
    ),
    force: bool = typer.Option(False, "--force", help="Replay even if the run's hash chain does not verify."),
    no_record: bool = typer.Option(False, "--no-record", help="Offline replay only: check, record no replay run."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    config: Path = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Replay RUN through today's loop and report the first divergence.

    Offline (default) needs no model server and no Docker: every request must
    hash as recorded. Exit code: 0 identical (fork: verdict PASS), 1 divergence,
    drift or another verdict, 9 identical up to where a killed run's recording
    ends, 10 re-execution drift that is noise only, 2-8 usage and store errors."""
    if reexecute and fork_at is not None:
        raise ConfigError("--reexecute and --fork-at are different replays; choose one")
    if no_record and (reexecute or fork_at is not None):
        raise ConfigError("--no-record applies to offline replay only")
    fork_flags = (model_url, model, temperature, top_p, top_k, seed, max_tokens)
    if fork_at is None and (any(v is not None for v in fork_flags) or allow_drift):
        raise ConfigError("--model-url, --model, --allow-drift and the sampling flags apply to --fork-at only")
    settings = load_settings(config, db_url=db)
    mode: ReplayMode = "fork" if fork_at is not None else "reexecute" if reexecute else "replay"
    overrides = ForkOverrides(model=model, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                              max_tokens=max_tokens)
    shown = StepProgress("replayed turns")
    try:
        report = replay_run(settings, ReplayRequest(
            run=run, mode=mode, force=force, record=not no_record, fork_at=fork_at, overrides=overrides,
            model_url=model_url, allow_drift=allow_drift), progress=shown.step)
    finally:
        shown.done()
    # Diffs of recorded and replayed content quote the model: escaped for the terminal.
    typer.echo(json.dumps(report.model_dump(mode="json"), indent=2) if as_json else printable(render(report)))
    if not as_json and report.mode == "fork" and report.replay_run_id and report.forked_at_turn is not None:
        print_live_part(settings.store_url, report.replay_run_id, report.forked_at_turn)
    code = exit_code(report)
    if code:
        raise typer.Exit(code)


def print_live_part(store_url: str, run_id: str, since: int) -> None:
    """A fork's own result: the turns it ran live, and its patch, as ``show`` prints them."""
    from rich.console import Console

    from cli.display.show import print_turns
    from cli.display.table import terminal_width
    from store import Store

    with Store.open(store_url, readonly=True, create=False) as store:
        trajectory = store.trajectory(run_id)
    console = Console(width=terminal_width())
    console.print()
    console.print(f"the fork's live turns ({since} on) and its patch (escrow show {run_id[:12]} has them all):",
                  highlight=False, markup=False)
    print_turns(console, trajectory, since=since)


def exit_code(report: ReplayReport) -> int:
    if report.mode == "fork":
        shared = report.identical or (report.allow_drift and report.divergence is None)
        return EXIT_IDENTICAL if shared and report.verdict == "PASS" else EXIT_DIFFERS
    if report.noise_only:
        return EXIT_NOISE_ONLY
    if not report.identical:
        return EXIT_DIFFERS
    return EXIT_RECORDING_ENDS if report.recording_ends_at is not None else EXIT_IDENTICAL


def render(report: ReplayReport, width: int | None = None) -> str:
    """The human-readable report: each sentence folded at words to the
    terminal's width (80 in a pipe); a diff's lines printed whole."""
    width = width or terminal_width()
    lines = _Lines(width)
    n = len(report.turns)
    same = sum(1 for t in report.turns if t.identical)
    title = {"replay": "replay", "reexecute": "re-execution", "fork": "fork"}[report.mode]
    lines.append(f"{title} of run {report.run_id}: {same}/{n} turn requests byte-identical")
    if report.replay_run_id:
        lines.append(f"  recorded as run {report.replay_run_id}")
    if report.forked_at_turn is not None and report.identical:
        lines.append(f"  forked at turn {report.forked_at_turn}; turns before it shared with the parent")
    elif report.forked_at_turn is not None and report.divergence is None:
        lines.append(f"  forked at turn {report.forked_at_turn} from a prefix that differs from the parent's "
                     "(--allow-drift): see the drift below")
    elif report.forked_at_turn is not None:
        lines.append(f"  fork at turn {report.forked_at_turn} refused: its prefix differs from the parent's")
    d = report.divergence
    if d is not None:
        lines.append(f"DIVERGED at turn {d.turn}: {d.kind} differs at {d.field}")
        if len(d.fields) > 1:
            lines.append(f"  also differs: {', '.join(d.fields[1:6])}{' ...' if len(d.fields) > 6 else ''}")
        lines.whole(d.diff.rstrip("\n"))
    for m in report.request_mismatches:
        lines.append(f"  turn {m.turn}: request differs at {m.field} (after drifted tool output)")
    for drift in report.drifts:
        # What differed, as the diff's own lines (the output hashes are in --json).
        label = "NOISE" if drift.noise else f"DRIFT ({drift.kind})"
        exits = ("" if drift.recorded_exit_code == drift.replayed_exit_code
                 else f", exit {drift.recorded_exit_code} -> {drift.replayed_exit_code}")
        lines.append(f"  {label} turn {drift.turn} candidate {drift.candidate_index} {drift.tool}{exits}; "
                     "what differs (- recorded, + re-executed):")
        lines.whole(_first_lines(drift.diff, DRIFT_DIFF_LINES))
    if report.noise_mismatches:
        lines.append(f"  noise: {len(report.noise_mismatches)} later request(s) differ only by volatile output")
    if report.first_drift_turn is not None:
        lines.append(f"first drifting turn: {report.first_drift_turn}")
    for note in report.notes:
        lines.append(f"  note: {note}")
    lines.append(f"verdict: {report.verdict} (recorded: {report.recorded_verdict})")
    if report.digest:
        match = (
            "identical to the recording"
            if report.digest == report.recorded_digest
            else f"recorded {report.recorded_digest}"
        )
        lines.append(f"content digest: {report.digest} ({match})")
    elif report.recorded_digest:
        lines.append(f"recorded content digest: {report.recorded_digest}")
    if report.mode != "fork" and report.identical and report.recording_ends_at is not None:
        lines.append(f"IDENTICAL UP TO TURN {report.recording_ends_at}, where the recording ends (the run died)")
    elif report.mode != "fork" and report.noise_only:
        lines.append("NOISE ONLY: outputs differ only in volatile fields (policy [replay] volatile)")
    elif report.mode != "fork":
        lines.append("IDENTICAL" if report.identical else "NOT IDENTICAL")
    return "\n".join(lines.out)


DRIFT_DIFF_LINES = 12  # of each drift's diff; --json carries it whole


def _first_lines(diff: str, most: int) -> str:
    lines = diff.rstrip("\n").splitlines() or ["(no line differs: see --json)"]
    shown = lines[:most]
    if len(lines) > most:
        shown.append(f"… {len(lines) - most} more line(s) (--json has the whole diff)")
    return "\n".join(shown)


class _Lines:
    """Prose folded to the width as it is added; ``whole`` for a diff."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.out: list[str] = []

    def append(self, text: str) -> None:
        indent = len(text) - len(text.lstrip(" "))
        self.out += [" " * indent + line for line in prose(text.lstrip(" "), self.width - indent)]

    def whole(self, text: str) -> None:
        self.out.append(text)
