"""The ``escrow`` command. Each sub-module registers its own commands; this
module only assembles them and turns typed errors into clear messages.

Start-up stays light: a sub-command's module (and what it imports: the
store, the loop, Docker, HTTP) is imported only when that command runs.
``COMMANDS`` lists every command in help order with its module and the first
paragraph of its help, so ``escrow --help`` is printed without importing any
of them; tests/test_cli_lazy.py keeps the list equal to what the modules
register and the help pages equal to the eagerly built ones."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

# (command, module under cli/, first paragraph of its help)
COMMANDS: tuple[tuple[str, str, str], ...] = (
    (
        "run",
        "run_cmd",
        "Run the agent on TASK in a sandboxed copy of --repo; prints the verdict, the diff and the run id.",
    ),
    ("call", "call_cmd", "Make one model call and print its Envelope. Exits 0 only when the status is COMPLETED."),
    ("fault-server", "call_cmd", "Serve a scripted OpenAI-compatible model with injected faults until Ctrl-C."),
    ("runs", "runs_cmd", "List recorded runs, newest first, with token and cost totals."),
    ("show", "store_cmd", "Show one run turn by turn: the model's words, its tool calls and what they returned."),
    (
        "verify",
        "store_cmd",
        "Recompute the hash chain of a run (or all runs) and report the first broken link, then check every page of "
        "the store file. Exits 1 when any chain is broken, 4 when the store is damaged.",
    ),
    ("migrate", "store_cmd", "Bring an existing store to this Escrow's schema version."),
    (
        "gc",
        "store_cmd",
        "Delete whole runs older than a span, the blobs no other run uses, and the kept batch workspaces no run "
        "records. Each deletion of a run is recorded in the deletions table.",
    ),
    (
        "report",
        "report_cmd",
        "Cost of one run per turn (tokens cached/prefilled/re-sent, $, TTFT, decode, tool time, retries) with the "
        "cache comparison, or an aggregate over runs with p50/p95 (all runs by model when neither RUN nor a window is "
        "given). Prices come from `escrow price`.",
    ),
    (
        "export",
        "export_cmd",
        "Export runs as JSON lines. messages-jsonl: one TRL conversational example per run (messages, tools, tool-call "
        "arguments as objects, truncation flags, tokenizer id), verified-PASS runs only unless --include-unverified. "
        "events-jsonl: every recorded row, in chain order. atif: an ATIF-v1.6 trajectory (one JSON document; JSON "
        "lines with --all). otel: OpenTelemetry GenAI spans as OTLP JSON, or sent to --otlp-endpoint. rollout: one "
        "training sequence a row (token ids, loss mask, logprobs, the verifier's reward, provenance); a run without "
        "exact ids is refused.",
    ),
    (
        "import",
        "import_cmd",
        "Import trajectories recorded by other agents as runs (mode import), one transaction per file, for `escrow "
        "report`, `show` and `export`.",
    ),
    (
        "tokens",
        "tokens_cmd",
        "Classify each model call of RUN against the one before it: CLEAN (its prompt ids extend the last prompt and "
        "sampled ids), REALIGN (they differ only in the end-of-turn tokens), FORK (history rewritten) or ABSENT (no "
        "ids); check the ids against the call's usage and logprobs. Exits 1 when recorded ids contradict the run's "
        "own figures.",
    ),
    (
        "score",
        "score_cmd",
        "Ask a teacher for its logprob of every token the runs' answered calls sampled (a batch's runs: each task's "
        "latest), over the exact recorded ids, after checking that teacher and student tokenize alike; record each "
        "call's score in its run's chain and print, per run and turn, the tokens scored, the mean reverse KL "
        "estimate (student - teacher logprob) and the share outside the teacher's top K. Calls already scored by "
        "this teacher and K are not asked again. Exits 1 when a call could not be scored; 6 when an id names no run "
        "or batch, or both; 8 for a batch without runs.",
    ),
    ("replay", "replay_cmd", "Replay RUN through today's loop and report the first divergence."),
    ("verify-patch", "verify_patch_cmd", "Re-verify RUN's recorded patch under today's rules."),
    (
        "parity",
        "parity_cmd",
        "Re-send every recorded request of RUN unchanged and compare each answer with the record: the first divergent "
        "token, and whether it is a near tie (each side's token in the other's top-k) or a real difference; also the "
        "tool calls that would be released, and the status. Exits 1 when any call differs for real (divergent or "
        "status changed), 0 otherwise.",
    ),
    (
        "view",
        "view_cmd",
        "Browse recorded runs in a web browser: runs, each run turn by turn, and two runs compared. The store is "
        "opened read-only.",
    ),
    ("batch", "batch_cmd", "Run every task of a task file, or show a batch."),
    ("sandbox", "sandbox_cmd", "Build, check and clean up the hardened Docker sandbox."),
    ("policy", "policy_cmd", "Validate and explain capability policies."),
    ("price", "price_cmd", "Show the price table and edit local price overrides."),
)
MODULES = tuple(dict.fromkeys(module for _, module, _ in COMMANDS))
SETTINGS: dict[str, Any] = {
    # click's help layout: the option column is capped at 30 characters, so
    # descriptions keep at least 44 of 80 columns instead of a squeezed table.
    "rich_markup_mode": None,
    "pretty_exceptions_enable": False,
    "add_completion": False,
}


def commands_of(module: str) -> dict[str, Any]:
    """The click commands ``cli.<module>`` registers, built as the root app
    would build them."""
    holder = typer.Typer(**SETTINGS)
    holder.callback()(lambda: None)  # a group even when the module registers one command
    importlib.import_module(f"cli.{module}").register(holder)
    from cli.usage import conventional

    return {name: conventional(command) for name, command in typer.main.get_group(holder).commands.items()}


class LazyGroup(TyperGroup):
    """Lists ``COMMANDS`` and imports a command's module on first use."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [name for name, _, _ in COMMANDS]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands:
            module = next((m for name, m, _ in COMMANDS if name == cmd_name), None)
            if module is None:
                return None
            self.commands.update(commands_of(module))
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """click's own layout; a command not loaded yet is shortened from its
        ``COMMANDS`` paragraph by the same rule (typer's click's)."""
        limit = formatter.width - 6 - max(len(name) for name, _, _ in COMMANDS)
        rows = []
        for name, _, first_paragraph in COMMANDS:
            command = self.commands.get(name) or TyperCommand(name=name, help=first_paragraph)
            rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="escrow",
    help="Run coding agents against self-hosted models, record every step, replay and price them.",
    no_args_is_help=True,
    cls=LazyGroup,
    **SETTINGS,
)


def _version(value: bool) -> None:
    if value:
        from orchestrator import __version__

        typer.echo(f"escrow {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    """Escrow: agent-loop orchestrator with deterministic replay."""
    # stdout is for data (a --json payload, a patch): every command's logs go
    # to stderr from its first line on. structlog's default prints to stdout,
    # which put "model has no price" in front of `escrow batch --json`.
    from cli.logging_setup import configure_logging

    configure_logging(json_lines=False)


def main() -> None:
    """Console entry point: a user mistake never ends in a traceback."""
    try:
        app()
    except KeyboardInterrupt:
        from rich.console import Console

        Console(stderr=True).print("[yellow]interrupted[/]")
        sys.exit(130)
    except Exception as exc:
        from orchestrator.errors import EscrowError

        if not isinstance(exc, EscrowError):
            raise
        from rich.console import Console
        from rich.text import Text

        from cli.display.table import terminal_width, wrapped
        from orchestrator.terminal_text import printable

        # The message may quote a file, a task or a model's words: text, never markup, controls escaped;
        # folded at words to the terminal's width (80 in a pipe), a word (a path, a URL) never cut.
        err = Console(stderr=True, soft_wrap=True)
        parts = [part for line in f"error: {printable(exc.message)}".splitlines()
                 for part in wrapped(line, terminal_width(), indent="  ")]
        for n, part in enumerate(parts):
            err.print(Text("error:", style="bold red").append(part[6:]) if n == 0 else Text(part), highlight=False)
        sys.exit(exc.exit_code)
