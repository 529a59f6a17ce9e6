"""``escrow call``: one real model call, printed as its Envelope; and
``escrow fault-server``: the fault-injection server, standalone."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from orchestrator.adapters.model_client.engines import SCHEMA_STYLES, response_format
from orchestrator.adapters.model_client.reach import require_model
from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.envelope import Envelope, Status
from orchestrator.errors import ConfigError
from orchestrator.exit_codes import ExitCode
from orchestrator.settings import load_settings

_STYLE = {Status.COMPLETED: "green", Status.TRUNCATED: "yellow", Status.REFUSED: "magenta", Status.CANCELED: "cyan"}


def _schema_format(path: Path, style: str) -> dict:
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--json-schema {path}: not a readable JSON file ({exc})", path=str(path)) from exc
    if not isinstance(schema, dict):
        raise ConfigError(f"--json-schema {path}: a JSON Schema must be an object", path=str(path))
    return response_format(schema, style)


def _figure(value: int, source: str) -> str:
    # A figure the server did not send is recorded 0 with its source absent: shown absent, never 0.
    return "absent" if source == "absent" else f"{value:,} ({source})"


def envelope_json(envelope: Envelope) -> dict:
    """The envelope as JSON, a figure the server did not send null (the
    recorded envelope keeps its 0 beside the ``absent`` source, for its bytes)."""
    doc = envelope.model_dump(mode="json")
    usage = doc["usage"]
    for figure, source in (("prompt_tokens", "prompt_source"), ("cached_prompt_tokens", "cached_source"),
                           ("completion_tokens", "completion_source")):
        if usage[source] == "absent":
            usage[figure] = None
    return doc


def render_envelope(envelope: Envelope, console: Console) -> None:
    status = envelope.status
    console.print(f"[bold {_STYLE.get(status, 'red')}]{status.value}[/]", highlight=False)
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    if envelope.error is not None:
        table.add_row("error", f"{envelope.error.kind}: {envelope.error.message}")
    table.add_row("finish_reason", envelope.finish_reason or "absent")
    table.add_row("http", "absent (no response)" if envelope.http_status is None else str(envelope.http_status))
    # What the server did not say reads absent, never "None".
    said = [(name, value) for name, value in (("engine", envelope.engine),
                                              ("fingerprint", envelope.system_fingerprint)) if value]
    table.add_row("model", (envelope.model or "absent (the server named none)")
                  + (f" ({', '.join(f'{k} {v}' for k, v in said)})" if said else ""))
    u = envelope.usage
    table.add_row(
        "usage",
        f"prompt {_figure(u.prompt_tokens, u.prompt_source)}, cached {_figure(u.cached_prompt_tokens, u.cached_source)}"
        f", completion {_figure(u.completion_tokens, u.completion_source)}"
        + (f", from {u.server_block}" if u.server_block else "")
        + (f", reasoning {u.reasoning_tokens} ({u.reasoning_convention})" if u.reasoning_tokens is not None else ""),
    )
    t = envelope.timings
    ttft = "-" if t.ttft_s is None else f"{t.ttft_s * 1000:.0f} ms"
    decode = "-" if t.decode_s is None else f"{t.decode_s * 1000:.0f} ms"
    table.add_row("timings", f"ttft {ttft}, decode {decode}, total {t.total_s * 1000:.0f} ms")
    table.add_row(
        "attempts",
        ", ".join(
            f"#{a.number} {a.status.value}"
            + (f" {a.http_status}" if a.http_status else "")
            + (f" then wait {a.backoff_s:.2f}s" if a.backoff_s else "")
            for a in envelope.attempts
        ),
    )
    if envelope.logprobs is not None:
        ids = "with" if envelope.completion_token_ids is not None else "without"
        mode = f", mode {envelope.logprobs_mode}" if envelope.logprobs_mode else ""
        summary = f"{len(envelope.logprobs)} tokens, top-{envelope.top_logprobs}, {ids} token ids{mode}"
        table.add_row("logprobs", summary)
    console.print(table)
    payload = envelope.payload
    if payload.reasoning:
        console.rule("reasoning")
        console.print(payload.reasoning, highlight=False, markup=False)
    if payload.refusal:
        console.print(f"[magenta]refusal:[/] {payload.refusal}", highlight=False, markup=False)
    for call in payload.tool_calls:
        console.print(f"tool call {call.name}({call.arguments})", highlight=False, markup=False)
    if payload.text:
        console.rule("payload" + ("" if status is Status.COMPLETED else " (quarantined)"))
        console.print(payload.text, highlight=False, markup=False)


def call(
    prompt: str = typer.Argument(..., help="The user message to send."),
    model_url: str = typer.Option(
        None, "--model-url", help="OpenAI-compatible base URL ending in /v1 (settings: model_url)."
    ),
    model: str = typer.Option(None, "--model", help="Model id to ask for (settings: model)."),
    max_tokens: int = typer.Option(
        None, "--max-tokens", min=1, help="Most output tokens (settings: max_output_tokens)."
    ),
    stream: bool = typer.Option(True, "--stream/--no-stream", help="Stream over SSE (default) or ask for one body."),
    system: str = typer.Option(None, "--system", help="An optional system message."),
    json_schema: Path = typer.Option(None, "--json-schema", help="Constrain the output to this JSON Schema file."),
    schema_style: str = typer.Option(
        "json_schema",
        "--schema-style",
        help="How to send the schema: json_schema (OpenAI, vLLM) or json_object (llama-cpp-python).",
    ),
    deadline: float = typer.Option(120.0, "--deadline", min=0.001,
                                   help="Seconds the whole call may take (retries included)."),
    temperature: float = typer.Option(None, "--temperature", help="Sampling temperature (settings: temperature)."),
    logprobs: int = typer.Option(
        None, "--logprobs", min=0, max=20, help="Record per-token logprobs with the K most likely alternatives."
    ),
    token_ids: bool = typer.Option(
        False, "--token-ids", help="Ask for token ids too (vLLM return_token_ids; llama.cpp sends them with logprobs)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the Envelope as JSON."),
) -> None:
    """Make one model call and print its Envelope. Exits 0 only when the status is COMPLETED."""
    from orchestrator.adapters.model_client.client import ModelClient

    if schema_style not in SCHEMA_STYLES:
        raise ConfigError(f"--schema-style must be json_schema or json_object, not {schema_style!r}")
    settings = load_settings(model_url=model_url, model=model)
    messages = ((Message(role="system", content=system),) if system else ()) + (Message(role="user", content=prompt),)
    request = ModelRequest(
        model=require_model(settings.model_url, settings.model),
        messages=messages,
        max_tokens=max_tokens or settings.max_output_tokens,
        deadline_s=deadline,
        stream=stream,
        response_format=_schema_format(json_schema, schema_style) if json_schema else None,
        sampling=Sampling(
            temperature=settings.temperature if temperature is None else temperature, seed=settings.seed,
            logprobs=logprobs is not None, top_logprobs=logprobs,
            extra={"return_token_ids": True} if token_ids else {},
        ),
    )
    with ModelClient(settings.model_url, api_key=settings.api_key) as client:
        if logprobs is not None:
            client.engine_info()  # the engine's report says what its logprobs are taken from
        envelope = client.call(request)
    if as_json:
        typer.echo(json.dumps(envelope_json(envelope), indent=2))
    else:
        render_envelope(envelope, Console())
    if envelope.status is not Status.COMPLETED:
        raise typer.Exit(ExitCode.FINDING)


def fault_server(
    script: Path = typer.Option(
        None, "--script", help='JSON script: {"steps": [{"kind": "reply", "text": "hi"}, ...], "cycle": false}; '
        "every step kind and field: docs/FAULT_SERVER.md."
    ),
    fixes: Path = typer.Option(
        None,
        "--fixes",
        help="A task directory (examples/tasks): play each task's fix.patch "
        "under /k/TASK_ID/v1, for `escrow batch --model-url .../k/{task_id}/v1`; "
        "each new run of a task (its first request) starts the fix again.",
    ),
    port: int = typer.Option(8099, "--port", min=0, max=65535, help="Port to listen on (0 picks a free one)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; loopback unless you mean otherwise."),
    model: str = typer.Option("fault-model", "--model", help="Model id listed at /v1/models."),
    as_json: bool = typer.Option(False, "--json", help="Announce the address as one JSON line."),
) -> None:
    """Serve a scripted OpenAI-compatible model with injected faults until Ctrl-C.

    The script format: docs/FAULT_SERVER.md."""
    from orchestrator.adapters.fault_server import FaultServer, Script

    if (script is None) == (fixes is None):
        raise ConfigError("give --script FILE or --fixes DIR (one of them)")
    if fixes is not None:
        return _serve_fixes(fixes, host, port, model, as_json)
    try:
        loaded = Script.model_validate_json(script.read_bytes())
    except OSError as exc:
        raise ConfigError(f"--script {script}: cannot read ({exc.strerror})", path=str(script)) from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "file"
        raise ConfigError(f"--script {script}: invalid at {where}: {first['msg']}", path=str(script)) from exc
    server = FaultServer(host=host, port=port, model=model)
    server.load(loaded)
    server.start()
    try:
        if as_json:
            typer.echo(json.dumps({"base_url": server.base_url, "port": server.port, "steps": len(loaded.steps)}))
        else:
            typer.echo(f"fault server: {len(loaded.steps)} steps at {server.base_url} (Ctrl-C to stop)")
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def _serve_fixes(root: Path, host: str, port: int, model: str, as_json: bool) -> None:
    from orchestrator.adapters.fault_server import FaultServer
    from orchestrator.composition.batch.scripted import example_scripts

    if not root.is_dir():
        raise ConfigError(f"--fixes {root} is not a directory", path=str(root))
    scripts = example_scripts(root)
    server = FaultServer(host=host, port=port, model=model)
    for task_id, steps in scripts.items():
        server.script_for(task_id, steps, restart=True)
    server.start()
    url = f"http://{host}:{server.port}/k/{{task_id}}/v1"
    try:
        if as_json:
            typer.echo(json.dumps({"model_url": url, "port": server.port, "tasks": len(scripts)}))
        else:
            typer.echo(f"fault server: the known fixes of {len(scripts)} tasks at {url} (Ctrl-C to stop)")
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def register(app: typer.Typer) -> None:
    app.command("call")(call)
    app.command("fault-server")(fault_server)
