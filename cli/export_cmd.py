"""``escrow export``: recorded runs as JSON lines, either TRL-ready chat
examples (verified-PASS runs only, unless asked) or every recorded row."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import typer
from rich.console import Console

from cli.display.table import prose, terminal_width
from cli.store_cmd import open_store
from cli.store_options import CONFIG_HELP, DB_HELP
from cli.usage import choices
from orchestrator.canonical import readable_text
from orchestrator.costing import NothingToReport
from orchestrator.errors import ConfigError
from orchestrator.rollout import SHAPES
from store import Store
from store.read.reports import FORMATS, ExportError, conversation, event_lines, is_verified_pass, run_ids
from store.read.reports.atif_export import to_atif
from store.read.reports.tokens import token_lines


@contextmanager
def sink(output: Path | None) -> Iterator[IO[str]]:
    if output is None:
        yield typer.get_text_stream("stdout")
        return
    try:
        with output.open("w", encoding="utf-8") as fh:
            yield fh
    except OSError as exc:
        raise ConfigError(f"cannot write {output}: {exc.strerror or exc}", path=str(output)) from None


def write_line(out: IO[str], value: dict[str, Any]) -> None:
    out.write(_json(value) + "\n")


def export_run(store: Store, run_id: str, fmt: str, include_unverified: bool, out: IO[str], *, single: bool,
               reasoning: bool = False, tokens: bool = False, calls: Counter[str] | None = None) -> str | None:
    """Write one run; returns why it was skipped, or None when written.
    ``calls`` counts the token lines written and those with token ids."""
    trajectory = store.trajectory(run_id)
    if fmt == "atif":
        try:
            document = to_atif(trajectory)
        except ExportError as exc:  # no answered call: --all goes on, as the chat format does
            if single:
                raise
            return exc.message
        out.write(_json(document, indent=2 if single else None) + "\n")
        return None
    if fmt == "events-jsonl":
        for line in event_lines(trajectory):
            write_line(out, line)
        return None
    if not include_unverified and not is_verified_pass(trajectory):
        reason = f"run {trajectory.run.id} is not a verified PASS (verdict {trajectory.run.verdict or 'none'})"
        if single:
            raise ExportError(f"{reason}; add --include-unverified to export it anyway", run_id=trajectory.run.id)
        return reason
    if tokens:
        for line in token_lines(trajectory):
            write_line(out, line)
            if calls is not None:
                calls["lines"] += 1
                calls["with_ids"] += bool(line["token_faithful"])
        return None
    try:
        write_line(out, conversation(trajectory, reasoning=reasoning))
    except ExportError as exc:
        if single:
            raise
        return exc.message
    return None


def export(
    run: str | None = typer.Argument(None, help="Run id or unique prefix; or use --all."),
    all_runs: bool = typer.Option(False, "--all", help="Export every run in the store."),
    fmt: str = typer.Option("messages-jsonl", "--format", metavar=choices(FORMATS),
                               help="The export format."),
    include_unverified: bool = typer.Option(
        False, "--include-unverified", help="messages-jsonl: also runs without a PASS verdict."
    ),
    tokens: bool = typer.Option(
        False,
        "--tokens",
        help=(
            "One token-faithful line per call (token ids, tokens, logprobs as the engine sent them) instead of one "
            "conversation per run."
        ),
    ),
    reasoning: bool = typer.Option(
        False,
        "--reasoning",
        help="messages-jsonl: add the recorded reasoning to assistant messages as reasoning_content.",
    ),
    shape: str = typer.Option(
        "flat", "--shape", metavar=choices(SHAPES),
        help="rollout: the columns: flat (input_ids, loss_mask, logprobs), trl, verl, or atif step metrics.",
    ),
    batch: str | None = typer.Option(None, "--batch", help="rollout: every run of this batch."),
    teacher_model: str | None = typer.Option(
        None, "--teacher-model",
        help="rollout: add teacher_logprobs, this teacher's logprob of each sampled id (escrow score), where the "
             "loss mask is 1, and teacher_top_ids and teacher_top_logprobs, its top K there (K a position); "
             "absent from a sequence with a call it did not score (the top K also where it gave none by id)."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write to this file instead of stdout (rollout: .parquet writes Parquet)."
    ),
    otlp_endpoint: str | None = typer.Option(
        None, "--otlp-endpoint", help="otel: send to this OTLP/HTTP traces URL instead of writing JSON."
    ),
    otel_project: str = typer.Option(
        "escrow", "--otel-project", help="otel: the project (openinference.project.name) resource attribute."
    ),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Export runs as JSON lines. messages-jsonl: one TRL conversational
    example per run (messages, tools, tool-call arguments as objects,
    truncation flags, tokenizer id), verified-PASS runs only unless
    --include-unverified. events-jsonl: every recorded row, in chain order.
    atif: an ATIF-v1.6 trajectory (one JSON document; JSON lines with --all).
    otel: OpenTelemetry GenAI spans as OTLP JSON, or sent to --otlp-endpoint.
    rollout: one training sequence a row (token ids, loss mask, logprobs,
    the verifier's reward, provenance); a run without exact ids is refused."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format takes one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt == "rollout":
        export_rollout(run, all_runs, batch, shape, output, db, config, teacher_model)
        return
    if batch is not None or shape != "flat" or teacher_model is not None:
        raise ConfigError("--batch, --shape and --teacher-model apply to --format rollout only")
    if all_runs == (run is not None):
        raise ConfigError("give a run id or --all (not both)")
    if tokens and fmt != "messages-jsonl":
        raise ConfigError("--tokens replaces the messages-jsonl lines; it does not combine with --format")
    if otlp_endpoint is not None and fmt != "otel":
        raise ConfigError("--otlp-endpoint applies to --format otel only")
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    with open_store(db, config) as store:
        ids = run_ids_for(store) if all_runs else [store.resolve(run or "")]
        if not ids:
            raise NothingToReport(f"no runs recorded in {store.url}")
        if fmt == "otel":
            export_otel(store, ids, output, otlp_endpoint, otel_project, err)
            return
        skipped: list[str] = []
        calls: Counter[str] = Counter()
        with sink(output) as out:
            for run_id in ids:
                reason = export_run(store, run_id, fmt, include_unverified, out, single=not all_runs,
                                    reasoning=reasoning, tokens=tokens, calls=calls)
                if reason:
                    skipped.append(reason)
    written = len(ids) - len(skipped)
    # --tokens writes its own format (a line a call), not messages-jsonl's conversations.
    what = (f"token lines (--tokens): {calls['lines']} call(s), {calls['with_ids']} with token ids" if tokens
            else fmt)
    for line in prose(f"exported {written} run(s) as {what}"
                      + (f"; skipped {len(skipped)}: {skipped[0]}{' ...' if len(skipped) > 1 else ''}"
                         if skipped else ""), terminal_width()):
        err.print(line, markup=False)
    if tokens and calls["lines"] and not calls["with_ids"]:
        for line in prose("warning: no call carried token ids (the server sent none): the lines hold text and "
                          "logprobs, not ids; docs/TOKENS.md says which servers send them and how to ask",
                          terminal_width()):
            err.print(line, markup=False)
    if written == 0:
        raise NothingToReport(f"nothing exported: {skipped[0] if skipped else 'no runs'}"
                              + ("" if fmt == "atif" else " (--include-unverified exports unverified runs)"))


def export_rollout(run: str | None, all_runs: bool, batch: str | None, shape: str, output: Path | None,
                   db: str | None, config: Path | None, teacher_model: str | None = None) -> None:
    from orchestrator.rollout import RolloutRefused
    from store.read.reports.rollout_export import rollout_rows, write_parquet

    if shape not in SHAPES:
        raise ConfigError(f"--shape takes one of {', '.join(SHAPES)}, not {shape!r}")
    if sum((run is not None, all_runs, batch is not None)) != 1:
        raise ConfigError("give one of a run id, --all or --batch")
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    with open_store(db, config) as store:
        if batch is not None:
            ids = batch_run_ids(store, batch)
        else:
            ids = run_ids_for(store) if all_runs else [store.resolve(run or "")]
        rows: list[dict[str, Any]] = []
        skipped: list[str] = []
        for run_id in ids:
            try:
                teacher = None if teacher_model is None else {
                    r["call_id"]: r for r in store.teacher_scores(run_id, teacher_model)}
                rows += rollout_rows(store.trajectory(run_id), shape, teacher)
            except RolloutRefused as exc:
                if run is not None:
                    raise ExportError(f"run {run_id} cannot be exported as rollout: {exc.message}",
                                      run_id=run_id) from None
                skipped.append(f"run {run_id}: {exc.message}")
    if output is not None and output.suffix == ".parquet":
        write_parquet(output, rows)
    else:
        with sink(output) as out:
            for line in rows:
                write_line(out, line)
    err.print(f"exported {len(rows)} sequence(s) of {len(ids) - len(skipped)} run(s) as rollout ({shape})"
              + (f"; refused {len(skipped)}: {skipped[0]}{' ...' if len(skipped) > 1 else ''}" if skipped else ""))
    if not rows:
        raise NothingToReport("nothing exported: no run has exact token ids")


def batch_run_ids(store: Store, ref: str) -> list[str]:
    from orchestrator.composition.batch.driver import find_batch
    from orchestrator.composition.batch.errors import BatchNotFound
    from store.write.batches import load_batch

    batch_id = find_batch(store, ref)
    view = load_batch(store, batch_id)
    if view is None:
        raise BatchNotFound(f"no batch matches {ref!r}", batch=ref)
    return [a.run_id for a in view.attempts if a.run_id is not None]


def export_otel(
    store: Store, ids: list[str], output: Path | None, endpoint: str | None, project: str, err: Console
) -> None:
    from store.read.reports import otel_export

    spans = otel_export.collect((store.trajectory(run_id) for run_id in ids), project)
    if endpoint:
        otel_export.send(spans, endpoint)
        err.print(f"sent {len(spans)} span(s) of {len(ids)} run(s) to {endpoint}")
        return
    with sink(output) as out:
        out.write(_json(otel_export.otlp_json(spans)) + "\n")
    err.print(f"exported {len(spans)} span(s) of {len(ids)} run(s) as OTLP JSON")


def run_ids_for(store: Store) -> list[str]:
    with store.read() as conn:
        return run_ids(conn)


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def _json(value: object, indent: int | None = None) -> str:
    """JSON as readable UTF-8; all-ASCII escapes when it holds a lone surrogate
    (a recorded byte that is not UTF-8), which UTF-8 output cannot carry."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    return json.dumps(value, indent=indent) if text != readable_text(text) else text
