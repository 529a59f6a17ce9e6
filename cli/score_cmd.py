"""``escrow score RUN|BATCH...``: a teacher's logprob of every token the runs'
answered calls sampled, recorded in each run's chain (on-policy distillation)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from cli.display.table import Column, render, terminal_width, wrapped
from cli.store_options import CONFIG_HELP, DB_HELP, emit_json
from orchestrator.costing.money import dollars
from orchestrator.errors import NothingToReport, TeacherAnswerInvalid
from orchestrator.exit_codes import ExitCode
from orchestrator.settings import load_settings
from orchestrator.teacher_figures import Figures, call_figures, student_logprobs, total
from policies.pricing import cost_breakdown
from store import RunNotFound, Store
from store.write.teacher_scores import CallScore

if TYPE_CHECKING:
    from orchestrator.adapters.model_client.teacher_scoring import TeacherClient
    from orchestrator.envelope import Envelope
    from policies.price_table import PriceTable

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


def teacher_summaries(store: "Store", run_id: str, prices: "PriceTable | None" = None) -> list[dict[str, Any]]:
    """Per teacher and K that scored the run (``report RUN``): the figures,
    the teacher's prefill (every id it read: prompt and sampled) and its
    price, priced as a call's input tokens and GPU seconds are (absent where
    the price table has no price for the teacher's model, or a GPU price
    meets a row without its seconds)."""
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
    out = []
    for (model, engine, k), scored in groups.items():
        prefill = sum(p for _, p, _ in scored)
        gpu_s = None if any(s is None for _, _, s in scored) else sum(s or 0.0 for _, _, s in scored)
        price = prices.lookup(model) if prices is not None else None
        cost = None if price is None or (gpu_s is None and price.gpu_per_hour) else \
            cost_breakdown(prefill, 0, 0, gpu_s or 0.0, price).total_usd
        out.append({"model": model, "engine": engine, "top_k": k, "prefill_tokens": prefill, "gpu_s": gpu_s,
                    "cost_usd": cost, **_json(total(f for f, _, _ in scored))})
    return out


def teacher_line(summary: dict[str, Any]) -> str:
    share = summary["outside_top_k"]
    gpu = "-" if summary["gpu_s"] is None else f"{summary['gpu_s']:.2f}"
    return (f"teacher {summary['model']} ({summary['engine']}, top K {summary['top_k']}): {summary['tokens']} "
            f"tokens scored, prefill {summary['prefill_tokens']} tokens, GPU s {gpu}, "
            f"cost {dollars(summary['cost_usd'])}, reverse KL "
            f"{_kl(summary['reverse_kl']) or '-'}/token, {'-' if share is None else f'{share * 100:.0f}%'} "
            "outside top K (escrow score)")


def by_turn(figures: list[tuple[int | None, Figures]]) -> dict[int | None, Figures]:
    turns: dict[int | None, Figures] = {}
    for turn, f in figures:
        turns[turn] = turns.get(turn, Figures()) + f
    return dict(sorted(turns.items(), key=lambda item: -1 if item[0] is None else item[0]))


class _RunScoring:
    """One run's part of a scoring: its answered calls, the figures of the
    rows already there (as read) and of those written now, the calls to
    score and why others were refused."""

    def __init__(self, store: "Store", teacher: "TeacherClient", run_id: str) -> None:
        self.run_id = run_id
        self.envelopes = {call_id: (turn, envelope) for call_id, turn, envelope in store.answered_envelopes(run_id)}
        done = store.teacher_scores(run_id, teacher.model, teacher.top_k)
        # Chain order, as a re-read would give them: the rows already there, then each as it is written.
        self.figures = [(row["turn"], self.call_figures(row["call_id"], row["logprobs"], row["in_top_k"]))
                        for row in done if row["call_id"] in self.envelopes]
        scored = {row["call_id"] for row in done}
        self.todo: list[tuple[str, int | None, "Envelope"]] = []
        self.refused: list[str] = []
        self.scored = 0
        for call_id, (turn, envelope) in self.envelopes.items():
            if call_id in scored:
                continue
            if not envelope.prompt_token_ids or not envelope.completion_token_ids:
                self.refused.append(f"call {call_id[:12]} (turn {turn}): no exact ids recorded; nothing to score")
                continue
            self.todo.append((call_id, turn, envelope))

    def call_figures(self, call_id: str, logprobs: Sequence[float | None], in_top_k: Sequence[bool | None]) -> Figures:
        return call_figures(student_logprobs(self.envelopes[call_id][1]), logprobs, in_top_k)


_Call = tuple[_RunScoring, str, int | None, "Envelope"]  # a call to score: its run, id, turn and envelope


def _scored(store: "Store", teacher: "TeacherClient", runs: list[_RunScoring], parallel: int) -> None:
    """Score every run's calls not yet scored, ``parallel`` in flight across runs."""
    todo = [(run, call_id, turn, envelope) for run in runs for call_id, turn, envelope in run.todo]

    def score(item: _Call) -> Any:
        envelope = item[3]
        try:
            return teacher.score(envelope.prompt_token_ids or (), envelope.completion_token_ids or ())
        except TeacherAnswerInvalid as exc:
            return exc

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        # Scores are written in chain order as their answers are read: a kill
        # loses only the answers in flight, waiting for the one before them or
        # not yet written (under 3 x --parallel), and a rerun scores exactly
        # the calls without a row. One window over all runs: a run of fewer
        # calls than --parallel does not leave the teacher waiting for the next
        # run. Answers go in --parallel at a time, in one commit, since each
        # commit recomputes its finished runs' totals (a commit an answer cost
        # scoring a third of its throughput at 25,000 ids/s: bench_teacher).
        window: deque[tuple[_Call, Future[Any]]] = deque()
        unwritten: list[tuple[_Call, Any]] = []
        for item in todo:
            window.append((item, pool.submit(score, item)))
            if len(window) == 2 * parallel:
                unwritten += _ready_head(window)
                if len(unwritten) >= parallel:
                    _write(store, teacher, unwritten)
                    unwritten = []
        while window:
            unwritten += _ready_head(window)
        _write(store, teacher, unwritten)


def _ready_head(window: "deque[tuple[_Call, Future[Any]]]") -> list[tuple[_Call, Any]]:
    """The window's first answer (waited for) and the answers after it already in."""
    first, asked = window.popleft()
    ready = [(first, asked.result())]
    while window and window[0][1].done():
        item, asked = window.popleft()
        ready.append((item, asked.result()))
    return ready


def _write(store: "Store", teacher: "TeacherClient", answers: list[tuple[_Call, Any]]) -> None:
    scores: list[CallScore] = []
    for (run, call_id, turn, _), result in answers:
        if isinstance(result, TeacherAnswerInvalid):
            run.refused.append(f"call {call_id[:12]} (turn {turn}): {result.message}")
            continue
        scores.append(CallScore(
            run_id=run.run_id, call_id=call_id, turn=turn, teacher_model=teacher.model,
            teacher_engine=teacher.engine_label, top_k=teacher.top_k, request_sha256=result.request_sha256,
            logprobs=result.logprobs, in_top_k=result.in_top_k, top=result.top,
            duration_s=result.duration_s))
    if scores:
        store.record_teacher_scores(scores)
    for (run, call_id, turn, _), result in answers:
        if not isinstance(result, TeacherAnswerInvalid):
            run.scored += 1
            run.figures.append((turn, run.call_figures(call_id, result.logprobs, result.in_top_k)))


def named_runs(store: "Store", refs: list[str]) -> list[str]:
    """The runs the ids or prefixes name, each once: a run, or each task's
    latest recorded run of a batch. One that names both a run and a batch,
    or neither, is refused (exit 6), and so is a batch without runs (exit 8)."""
    from orchestrator.composition.batch.driver import find_batch
    from store.write.batches import load_batch, matching_batches

    run_ids: list[str] = []
    for ref in refs:
        runs = store.matching_runs(ref, limit=1)
        batches = matching_batches(store, ref, limit=1) if ref else []
        if runs and batches:
            raise RunNotFound(f"{ref!r} matches both a run ({runs[0][:12]}) and a batch ({batches[0][:12]}); "
                              "give more characters", ref=ref)
        if not batches:
            if not runs:
                raise RunNotFound(f"no run or batch matches {ref!r}", ref=ref)
            run_ids.append(store.resolve(ref))  # an ambiguous prefix is refused, naming what it matches
            continue
        batch_id = find_batch(store, ref)
        view = load_batch(store, batch_id)
        latest = [] if view is None else view.latest_runs()
        if not latest:
            raise NothingToReport(f"batch {batch_id[:12]} has no recorded run to score", batch=batch_id)
        run_ids += latest
    return list(dict.fromkeys(run_ids))


def score_runs(store: "Store", teacher: "TeacherClient", run_ids: list[str],
               parallel: int) -> dict[str, tuple[int, list[str], list[tuple[int | None, Figures]]]]:
    """Score every run's calls not yet scored: per run, how many were scored
    now, why the others were refused, and the turn and figures of every
    scored call in chain order, kept as the rows were read and written."""
    # A run named twice (its id and a prefix) is scored once.
    runs = [_RunScoring(store, teacher, run_id) for run_id in dict.fromkeys(run_ids)]
    _scored(store, teacher, runs, parallel)
    return {run.run_id: (run.scored, run.refused, run.figures) for run in runs}


def score(
    runs: list[str] = typer.Argument(
        ..., metavar="RUN|BATCH",
        help="Run ids or batch ids, or unique prefixes of either; a batch means each task's latest run."),
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
    sampled (a batch's runs: each task's latest), over the exact recorded
    ids, after checking that teacher and student tokenize alike; record each
    call's score in its run's chain and print, per run and turn, the tokens
    scored, the mean reverse KL estimate (student - teacher logprob) and the
    share outside the teacher's top K. Calls already scored by this teacher
    and K are not asked again. Exits 1 when a call could not be scored; 6
    when an id names no run or batch, or both; 8 for a batch without runs."""
    del resume  # scoring only what is missing is how the command always works
    from orchestrator.adapters.model_client.teacher_scoring import checked_teacher

    # Writable, but never created: scores belong to runs already recorded.
    with Store.open(load_settings(config, db_url=db).store_url, create=False) as store:
        run_ids = named_runs(store, runs)  # every id checked before the teacher is asked anything
        with checked_teacher(teacher_url, teacher_model, student_url, engine=engine, top_k=top_k,
                             parallel=parallel) as (teacher, found):
            scored = score_runs(store, teacher, run_ids, parallel)
    results = {run_id: (n, refused) for run_id, (n, refused, _) in scored.items()}
    figures = {run_id: kept for run_id, (_, _, kept) in scored.items()}
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
            count, refused = results[run_id]
            lines.append(f"run {run_id[:8]}: {count} calls scored now")
            for reason in refused:
                lines += wrapped(f"  refused: {reason}", width, indent="    ")
        typer.echo("\n".join(lines))
    if any(refused for _, refused in results.values()):
        raise typer.Exit(ExitCode.FINDING)


def register(app: typer.Typer) -> None:
    app.command("score")(score)
