"""``escrow score RUN...``: a teacher's logprob of every token the runs'
answered calls sampled, recorded in each run's chain (on-policy distillation)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from cli.display.table import Column, render, terminal_width, wrapped
from cli.store_options import CONFIG_HELP, DB_HELP, emit_json
from orchestrator.errors import TeacherAnswerInvalid
from orchestrator.exit_codes import ExitCode
from orchestrator.settings import load_settings
from orchestrator.teacher_figures import Figures, call_figures, student_logprobs, total
from store import Store
from store.teacher_scores import CallScore

if TYPE_CHECKING:
    from orchestrator.envelope import Envelope
    from orchestrator.model_client.teacher_scoring import TeacherClient

COLUMNS = (
    Column("run", "run", "text", rank=0),
    Column("turn", "turn", "text", rank=0),
    Column("tokens", "tokens scored"),
    Column("kl", "reverse KL/token", "text"),
    Column("outside", "outside top K", "ratio"),
)


def _kl(value: float | None) -> str | None:
    return None if value is None else f"{value:.4f}"


def _row(run: str, turn: str, f: Figures) -> dict[str, Any]:
    return {"run": run, "turn": turn, "tokens": f.tokens, "kl": _kl(f.reverse_kl), "outside": f.outside_share}


def _json(f: Figures) -> dict[str, Any]:
    return {"tokens": f.tokens, "reverse_kl": f.reverse_kl, "outside_top_k": f.outside_share,
            "kl_tokens": f.kl_tokens, "ranked_tokens": f.ranked}


def run_figures(store: "Store", run_id: str, teacher_model: str, top_k: int) -> list[tuple[int | None, Figures]]:
    """Per scored call, in chain order: its turn and figures."""
    envelopes = {call_id: envelope for call_id, _, envelope in store.answered_envelopes(run_id)}
    return [(row["turn"], call_figures(student_logprobs(envelopes[row["call_id"]]), row["logprobs"],
                                       row["in_top_k"]))
            for row in store.teacher_scores(run_id, teacher_model, top_k) if row["call_id"] in envelopes]


def teacher_summaries(store: "Store", run_id: str) -> list[dict[str, Any]]:
    """Per teacher and K that scored the run (``report RUN``): the figures and
    the teacher's prefill (every id it read: prompt and sampled)."""
    envelopes = {call_id: envelope for call_id, _, envelope in store.answered_envelopes(run_id)}
    groups: dict[tuple[str, str, int], list[tuple[Figures, int, float | None]]] = {}
    for row in store.teacher_scores(run_id):
        envelope = envelopes.get(row["call_id"])
        if envelope is None:
            continue
        prefill = len(envelope.prompt_token_ids or ()) + len(envelope.completion_token_ids or ())
        f = call_figures(student_logprobs(envelope), row["logprobs"], row["in_top_k"])
        key = (row["teacher_model"], row["teacher_engine"], row["top_k"])
        groups.setdefault(key, []).append((f, prefill, row["duration_s"]))
    return [{"model": model, "engine": engine, "top_k": k, "prefill_tokens": sum(p for _, p, _ in scored),
             "gpu_s": None if any(s is None for _, _, s in scored) else sum(s or 0.0 for _, _, s in scored),
             **_json(total(f for f, _, _ in scored))}
            for (model, engine, k), scored in groups.items()]


def teacher_line(summary: dict[str, Any]) -> str:
    share = summary["outside_top_k"]
    gpu = "-" if summary["gpu_s"] is None else f"{summary['gpu_s']:.2f}"
    return (f"teacher {summary['model']} ({summary['engine']}, top K {summary['top_k']}): {summary['tokens']} "
            f"tokens scored, prefill {summary['prefill_tokens']} tokens, GPU s {gpu}, reverse KL "
            f"{_kl(summary['reverse_kl']) or '-'}/token, {'-' if share is None else f'{share * 100:.0f}%'} "
            "outside top K (escrow score)")


def by_turn(figures: list[tuple[int | None, Figures]]) -> dict[int | None, Figures]:
    turns: dict[int | None, Figures] = {}
    for turn, f in figures:
        turns[turn] = turns.get(turn, Figures()) + f
    return dict(sorted(turns.items(), key=lambda item: -1 if item[0] is None else item[0]))


def _score_run(store: "Store", teacher: "TeacherClient", run_id: str, parallel: int) -> tuple[int, list[str]]:
    """Score the run's calls not yet scored by this teacher and K; returns how
    many were scored now and why the others were refused."""
    done = {row["call_id"] for row in store.teacher_scores(run_id, teacher.model, teacher.top_k)}
    todo: list[tuple[str, int | None, "Envelope"]] = []
    refused: list[str] = []
    for call_id, turn, envelope in store.answered_envelopes(run_id):
        if call_id in done:
            continue
        if not envelope.prompt_token_ids or not envelope.completion_token_ids:
            refused.append(f"call {call_id[:12]} (turn {turn}): no exact ids recorded; nothing to score")
            continue
        todo.append((call_id, turn, envelope))

    def score(item: tuple[str, int | None, "Envelope"]) -> Any:
        _, _, envelope = item
        try:
            return teacher.score(envelope.prompt_token_ids or (), envelope.completion_token_ids or ())
        except TeacherAnswerInvalid as exc:
            return exc

    scored = 0
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        # Each score is written as soon as its answer is read (map keeps the
        # order): a kill loses only the answers in flight, and a rerun scores
        # exactly the calls without a row.
        for (call_id, turn, _), result in zip(todo, pool.map(score, todo), strict=True):
            if isinstance(result, TeacherAnswerInvalid):
                refused.append(f"call {call_id[:12]} (turn {turn}): {result.message}")
                continue
            store.record_teacher_scores([CallScore(
                run_id=run_id, call_id=call_id, turn=turn, teacher_model=teacher.model,
                teacher_engine=teacher.engine_label, top_k=teacher.top_k, request_sha256=result.request_sha256,
                logprobs=result.logprobs, in_top_k=result.in_top_k, duration_s=result.duration_s)])
            scored += 1
    return scored, refused


def score(
    runs: list[str] = typer.Argument(..., help="Run ids, or unique prefixes of them."),
    teacher_url: str = typer.Option(..., "--teacher-url", help="The teacher engine's base URL."),
    teacher_model: str = typer.Option(..., "--teacher-model", help="The teacher's model name on that engine."),
    student_url: str = typer.Option(
        ..., "--student-url",
        help="A server with the student's tokenizer (llama-server, vLLM): teacher and student must tokenize alike."),
    top_k: int = typer.Option(1, "--top-k", min=1, help="How many of the teacher's best tokens to rank against."),
    engine: str | None = typer.Option(
        None, "--teacher-engine",
        help="vllm, sglang or llama-cpp-python; found from the server's own endpoints when not given."),
    parallel: int = typer.Option(4, "--parallel", min=1, help="Sequences in flight to the teacher."),
    resume: bool = typer.Option(
        False, "--resume", help="Score only calls not yet scored (what every run of the command does anyway)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    config: Path | None = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Ask a teacher for its logprob of every token the runs' answered calls
    sampled, over the exact recorded ids, after checking that teacher and
    student tokenize alike; record each call's score in its run's chain and
    print, per run and turn, the tokens scored, the mean reverse KL estimate
    (student - teacher logprob) and the share outside the teacher's top K.
    Calls already scored by this teacher and K are not asked again. Exits 1
    when a call could not be scored."""
    del resume  # scoring only what is missing is how the command always works
    from orchestrator.model_client.teacher_scoring import TeacherClient, check_vocabulary, teacher_engine
    from orchestrator.model_client.token_endpoints import EngineTokens

    # Writable, but never created: scores belong to runs already recorded.
    with Store.open(load_settings(config, db_url=db).store_url, create=False) as store:
        run_ids = [store.run(ref).id for ref in runs]
        found = teacher_engine(teacher_url, engine)
        with EngineTokens(student_url) as student, TeacherClient(
                teacher_url, teacher_model, found.engine, top_k=top_k, engine_label=found.label,
                decode=student.detokenize) as teacher:
            check_vocabulary(teacher, student_url)
            results = {run_id: _score_run(store, teacher, run_id, parallel) for run_id in run_ids}
        figures = {run_id: run_figures(store, run_id, teacher_model, top_k) for run_id in run_ids}
    if as_json:
        emit_json({"teacher": {"url": teacher_url, "model": teacher_model, "engine": found.label, "top_k": top_k},
                   "runs": [{"run_id": run_id, "scored_now": results[run_id][0], "refused": results[run_id][1],
                             **_json(total(f for _, f in figures[run_id])),
                             "turns": [{"turn": turn, **_json(f)} for turn, f in by_turn(figures[run_id]).items()]}
                            for run_id in run_ids]})
    else:
        width = terminal_width()
        rows = []
        for run_id in run_ids:
            rows.append(_row(run_id[:8], "all", total(f for _, f in figures[run_id])))
            rows += [_row("", "-" if turn is None else str(turn), f) for turn, f in by_turn(figures[run_id]).items()]
        lines = [f"teacher {teacher_model} ({found.label}), top K {top_k}", *render(COLUMNS, rows, width=width)]
        for run_id in run_ids:
            scored, refused = results[run_id]
            lines.append(f"run {run_id[:8]}: {scored} calls scored now")
            for reason in refused:
                lines += wrapped(f"  refused: {reason}", width, indent="    ")
        typer.echo("\n".join(lines))
    if any(refused for _, refused in results.values()):
        raise typer.Exit(ExitCode.FINDING)


def register(app: typer.Typer) -> None:
    app.command("score")(score)
