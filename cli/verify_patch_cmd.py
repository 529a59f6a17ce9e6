"""``escrow verify-patch RUN``: a recorded run's patch judged again under
today's rules (``orchestrator.composition.launch.verify_patch``)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cli.display.table import ABSENT, Column, render, terminal_width, wrapped
from cli.store_options import CONFIG_HELP, DB_HELP
from orchestrator.composition.launch.verify_patch import PatchVerification, verify_patch
from orchestrator.exit_codes import ExitCode
from orchestrator.settings import load_settings
from orchestrator.terminal_text import printable

FLAG_COLUMNS = (Column("path", "path", "text", rank=0, flex=True), Column("reason", "why", "text"),
                Column("detail", "in the verifier's copy", "text", flex=True))


def register(app: typer.Typer) -> None:
    app.command("verify-patch")(verify_patch_cmd)


def verify_patch_cmd(
    run: str = typer.Argument(..., help="Run id, or a unique prefix of one."),
    repo: Path = typer.Option(None, "--repo", help="The repository the run started from (default: the recorded "
                                                   "path)."),
    flags_only: bool = typer.Option(False, "--flags-only", help="Show what the verifier's copy leaves out or "
                                                                "overrides; do not run the verifier."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    config: Path = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Re-verify RUN's recorded patch under today's rules.

    The patch is applied to a fresh sandbox of the run's repository and
    submitted as a run's would be: what the verifier's copy leaves out or
    overrides and why (the flags), then the run's verify command in a fresh
    sandbox. Needs Docker. Exit code: 0 PASS (or --flags-only), 1 FAIL, 6 no
    such run, 8 no patch recorded, 69 no Docker daemon."""
    settings = load_settings(config, db_url=db)
    result = verify_patch(settings, run, repo=repo, run_verifier=not flags_only)
    typer.echo(json.dumps(result.model_dump(mode="json"), indent=2) if as_json else "\n".join(rendered(result)))
    if result.verdict is not None and result.verdict != "PASS":
        raise typer.Exit(ExitCode.FINDING)


def rendered(result: PatchVerification) -> list[str]:
    """The human report, every line within the terminal's width."""
    width = terminal_width()
    lines = wrapped(f"run {result.run_id} (recorded verdict: {result.recorded_verdict or ABSENT}); patch sha256 "
                    f"{result.patch_sha256[:16]}, {len(result.files)} files; repository {printable(result.repo)}",
                    width, "  ")
    if result.flagged:
        lines.append("flagged (what the verifier's copy leaves out or overrides, and why):")
        rows = [{"path": f.path, "reason": f.reason, "detail": f.detail or ABSENT} for f in result.flagged]
        lines += render(FLAG_COLUMNS, rows, width=width)
    else:
        lines.append("flagged: none (the verifier's copy takes the whole patch)")
    if result.verdict is None:
        why = "--flags-only" if result.verify else "the run had no verify command"
        lines.append(f"verdict today: {ABSENT} (not verified: {why})")
        return lines
    lines += wrapped(f"verdict today: {result.verdict} ({printable(result.verify or '')})", width, "  ")
    for line in printable(result.observation or "").splitlines()[:40]:
        lines += wrapped(line, width, "  ") if line else [""]
    return lines
