"""An absent figure is shown as absent, never as 0 (issue 27, point 4): a
server that sends no cached-token count, and a FAULTED call with no usage
at all, read "absent" (or "-" in a table or on a page) in ``show``, the
live display's lines, the viewer's run page and the ATIF export; JSON keeps
the ``*_source: "absent"`` beside the recorded 0."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.display.render import model_heading, model_line
from cli.display.steps import model_step
from cli.main import app
from cli.view.static_bundle import export_bundle
from orchestrator.contract import Message, ModelRequest, Sampling
from orchestrator.envelope import Attempt, Envelope, ErrorDetail, Payload, Status, Timings, Usage
from store import Recorder, Store

NO_CACHE_COUNT = Envelope(
    status=Status.COMPLETED, payload=Payload(text="looking"), finish_reason="stop", http_status=200,
    usage=Usage(prompt_tokens=1200, completion_tokens=40, prompt_source="server", completion_source="server"),
    timings=Timings(ttft_s=0.1, decode_s=0.2, total_s=0.3), model="m",
)
FAULTED = Envelope(
    status=Status.FAULTED, http_status=200, error=ErrorDetail(kind="malformed", message="not JSON"),
    timings=Timings(total_s=0.2), model="m",
)


def record_run(store: Store) -> str:
    recorder = Recorder(store)
    run_id = recorder.start_run(task="t", repo="/r", model="m", config={}, policy={})
    for turn, envelope in enumerate((NO_CACHE_COUNT, FAULTED)):
        with recorder.turn(run_id, turn) as tx:
            request = ModelRequest(model="m", messages=(Message(role="user", content="t"),), max_tokens=64,
                                   sampling=Sampling(temperature=0.0))
            tx.envelope(tx.request(request), envelope)
            tx.commit([Message(role="assistant", content="x")])
    recorder.finish_run(run_id, "FAULTED", "the model's answer was not JSON", turn=2)
    return run_id


def test_the_terminal_lines_say_absent() -> None:
    faulted = model_step(1, FAULTED)
    assert faulted.prompt_tokens is None and faulted.completion_tokens is None
    assert "tokens absent" in model_heading(faulted).plain and "0 in" not in model_heading(faulted).plain
    assert "[tokens absent]" in model_line(faulted)
    assert "1,200 in, 40 out" in model_heading(model_step(0, NO_CACHE_COUNT)).plain


def test_show_the_viewer_and_atif_say_absent(store: Store, home: Path, tmp_path: Path) -> None:
    run_id = record_run(store)
    shown = CliRunner().invoke(app, ["show", run_id, "--full"])
    assert shown.exit_code == 0, shown.output
    assert "tokens in 1,200 (cached absent) out 40" in shown.output
    assert "tokens in absent (cached absent) out absent" in shown.output and "tokens absent" in shown.output
    assert "(cached 0)" not in shown.output and "0 in, 0 out" not in shown.output

    as_json = json.loads(CliRunner().invoke(app, ["show", run_id, "--json"]).output)
    response = as_json["turns"][0]["calls"][0]["response"]
    assert response["cached_input_tokens"] == 0 and response["cached_input_tokens_source"] == "absent"

    export_bundle(store, tmp_path / "bundle", [run_id])
    page = re.sub(r"<[^>]+>", "", (tmp_path / "bundle" / f"run-{run_id}.html").read_text(encoding="utf-8"))
    flat = " ".join(page.split())
    assert "in 1200 (cached -, prefilled -) · out 40" in flat
    assert "in - (cached -, prefilled -) · out -" in flat
    assert "tokens input - · cached - · prefilled - · output -" in flat  # the FAULTED turn's sums

    out = tmp_path / "run.atif.json"
    atif = CliRunner().invoke(app, ["export", run_id, "--format", "atif", "--include-unverified", "-o", str(out)])
    assert atif.exit_code == 0, atif.output
    final = json.loads(out.read_text(encoding="utf-8"))["final_metrics"]
    assert "total_cached_tokens" not in final and final["total_prompt_tokens"] == 1200


def cached(prompt: int, cached_tokens: int) -> Envelope:
    """A call whose server sent a cached count."""
    return NO_CACHE_COUNT.model_copy(update={"usage": NO_CACHE_COUNT.usage.model_copy(
        update={"prompt_tokens": prompt, "cached_prompt_tokens": cached_tokens, "cached_source": "server"})})


def record_calls(store: Store, model: str, envelopes: tuple[Envelope, ...], finish: bool = True) -> str:
    recorder = Recorder(store)
    run_id = recorder.start_run(task="t", repo="/r", model=model, config={}, policy={})
    for turn, env in enumerate(envelopes):
        with recorder.turn(run_id, turn) as tx:
            request = ModelRequest(model=model, messages=(Message(role="user", content=f"t{turn}"),), max_tokens=64,
                                   sampling=Sampling(temperature=0.0))
            attempt = Attempt(number=1, status=env.status, http_status=200, duration_s=env.timings.total_s)
            tx.envelope(tx.request(request), env.model_copy(update={"model": model, "attempts": (attempt,)}))
            tx.commit([Message(role="assistant", content="x")])
    if finish:
        recorder.finish_run(run_id, "STOP_MAX_TURNS", "turns", turn=len(envelopes))
    return run_id


def by_model(store: Store) -> tuple[dict[str, dict[str, object]], list[str]]:
    """``report --by model``: its JSON groups and total by key, and its text
    table's lines (at 80 columns: a row a group)."""
    url = ["--db", store.url]
    got = CliRunner().invoke(app, ["report", "--by", "model", "--json", *url])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.stdout)
    text = CliRunner().invoke(app, ["report", "--by", "model", *url], env={"COLUMNS": "80"})
    assert text.exit_code == 0, text.output
    return {**{g["model"]: g for g in doc["groups"]}, "TOTAL": doc["total"]}, text.stdout.splitlines()


def table_cells(lines: list[str], label: str) -> list[str]:
    """The cells of the table's column headed ``label``, a row a group, then the total."""
    head = next(n for n, line in enumerate(lines) if line.split()[:1] == ["model"])
    at = lines[head].split().index(label)  # no header before it has a space
    rows = []
    for line in lines[head + 1:]:
        if not line.strip() or line.startswith("not shown"):
            break
        rows.append(line.split())
    return [row[at] for row in rows]


ABSENT_FIGURES = ("cached_tokens", "prefilled_tokens", "cache_hit_ratio")


@pytest.mark.parametrize("finish", [True, False], ids=["from-totals", "from-rows"])
def test_an_aggregate_shows_a_cached_count_no_server_sent_as_absent(store: Store, home: Path, finish: bool) -> None:
    """Runs whose server sent no cached count (llama.cpp's): ``report --by
    model`` gives their cached tokens, prefill and hit ratio as null and
    "-", not 0 and 0%, whether read from the run's stored totals or its rows;
    a group whose calls did report one (one of them 0) keeps its figures."""
    record_calls(store, "m", (NO_CACHE_COUNT, NO_CACHE_COUNT), finish)
    record_calls(store, "m", (NO_CACHE_COUNT,), finish)
    record_calls(store, "k", (cached(1000, 600), cached(1000, 0)), finish)
    groups, lines = by_model(store)
    assert all(groups["m"][name] is None for name in ABSENT_FIGURES), groups["m"]
    assert groups["m"]["prompt_tokens"] == 3 * 1200
    assert (groups["k"]["cached_tokens"], groups["k"]["prefilled_tokens"], groups["k"]["cache_hit_ratio"]) == (
        600, 1400, 0.3)
    # The total: the sum of the calls that reported one.
    assert (groups["TOTAL"]["cached_tokens"], groups["TOTAL"]["prompt_tokens"]) == (600, 3 * 1200 + 2000)
    # A row a group (k, m, then the total).
    assert table_cells(lines, "cached") == ["600", "-", "600"], lines
    # The total's hit rate is over the calls that reported a cached count
    # (600 of 2,000), not over every prompt token (11%: issue 42).
    assert table_cells(lines, "hit") == ["30%", "-", "30%"], lines


def test_a_group_where_some_calls_reported_a_cached_count_sums_theirs(store: Store, home: Path,
                                                                      tmp_path: Path) -> None:
    """Calls of one model, some with a cached count and some without (one run
    each way, and one run of both): the group's cached figure is the sum of
    those reported, as ``report RUN`` gives it; a group of none is absent,
    and the page's chart leaves its prompt unsplit."""
    record_calls(store, "m", (NO_CACHE_COUNT, cached(1000, 400)))
    record_calls(store, "m", (NO_CACHE_COUNT,))
    record_calls(store, "m", (cached(500, 100),))
    record_calls(store, "n", (NO_CACHE_COUNT,))
    groups, lines = by_model(store)
    # Prefilled is unknown where calls sent no cached count (issue 42: not
    # prompt - 0); the hit rate is over the run whose every call sent one.
    assert (groups["m"]["cached_tokens"], groups["m"]["prefilled_tokens"]) == (500, None)
    assert (groups["m"]["cache_hit_ratio"], groups["m"]["cached_calls"]) == (0.2, 2)
    assert all(groups["n"][name] is None for name in ABSENT_FIGURES), groups["n"]
    assert table_cells(lines, "cached") == ["500", "-", "500"], lines
    page = tmp_path / "by-model.html"
    done = CliRunner().invoke(app, ["report", "--by", "model", "--csv", "--html", str(page), "--db", store.url])
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[2].startswith("n,1,1,1200,,0,,") and "prompt, no cached count reported" in (
        page.read_text(encoding="utf-8"))
