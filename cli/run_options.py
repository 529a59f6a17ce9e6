"""The options ``escrow run`` and ``escrow batch`` share, declared once.

A batch passes them to each of its runs, so they read the same in both
``--help``s (tests/display/test_shared_run_options.py checks it). A new option
both commands take goes here, as a parameter default in both signatures. Not
here: ``--model-url`` (batch repeats it for replicas) and ``--verify-early``
(on by default in a run, off in a batch)."""

from __future__ import annotations

import typer

from cli.usage import choices
from orchestrator.settings import CONSTRAIN_CHOICES, RUNTIME_CHOICES

MODEL = typer.Option(None, "--model", help="Model id sent to the server; default: the one model the server lists.")
MAX_TURNS = typer.Option(
    None, "--max-turns", min=1, help="Turn limit per run (overrides the policy; a batch task's row overrides it)."
)
MAX_TOKENS = typer.Option(None, "--max-tokens", min=1, help="Most output tokens per model call.")
CONTEXT_WINDOW = typer.Option(
    None, "--context-window", min=256, help="The model's context window in tokens, when the server does not say."
)
TOOL_PROTOCOL = typer.Option(
    None, "--tool-protocol", metavar=choices(("native", "text")),
    help="native (OpenAI tools) or text (search/replace blocks).",
)
SYSTEM_ROLE = typer.Option(
    None, "--system-role", metavar=choices(("system", "user")),
    help="system, or user for chat templates without a system turn.",
)
CONSTRAIN = typer.Option(
    None, "--constrain", metavar=choices(CONSTRAIN_CHOICES),
    help="Constrain tool calls to the tools' schemas (a grammar, or tool_choice required): tools, off, or auto "
    "(the default: tools where the engine supports it).",
)
TOKENIZER = typer.Option(
    None, "--tokenizer", metavar="<auto|server|ENCODING>",
    help="auto, server, or a tiktoken encoding such as cl100k_base.",
)
STREAM = typer.Option(None, "--stream/--no-stream", help="Stream responses (SSE) or not.")
RUNTIME = typer.Option(
    None, "--runtime", metavar=choices(RUNTIME_CHOICES),
    help="The sandbox's kernel: auto (the default: runsc when dockerd has it, else runc), runsc (gVisor) or runc "
    "(the host's).",
)
TOKEN_EXACT = typer.Option(
    None, "--token-exact/--no-token-exact",
    help="Hold the conversation's token ids and send each prompt as ids: every id the engine reads is one it "
    "sampled or its own template added (llama.cpp's llama-server; with --tool-protocol text). Refused before "
    "the run if the engine takes no token prompt or its template is not prefix-preserving. See docs/TOKENS.md.",
)

SHARED = (MODEL, MAX_TURNS, MAX_TOKENS, CONTEXT_WINDOW, TOOL_PROTOCOL, SYSTEM_ROLE, CONSTRAIN, TOKENIZER, STREAM,
          RUNTIME, TOKEN_EXACT)
