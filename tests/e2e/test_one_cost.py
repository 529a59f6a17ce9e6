"""One cost per run, wherever it is shown: the loop's tally (the budget check
and ``run --json``), ``runs``, ``show``, ``report RUN``, the aggregate, the
viewer's run page and the ATIF and OTel exports agree to 1e-9, for runs with a
retried call (backoff slept), cached tokens, a call without usage and GPU
pricing. GPU is priced at $1 a second, so backoff counted as GPU time would
move every figure by the seconds slept."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.main import app
from cli.view.pages import run_shown
from orchestrator.adapters.fault_server import Fault, Reply
from orchestrator.agent import Verdict
from policies.price_table import set_price
from tests.e2e.test_run_faults import EDIT, SUBMIT, TEST, run, tool

pytestmark = [pytest.mark.docker]

TOLERANCE = 1e-9
BACKOFF_S = 0.4


def cli_json(env: dict[str, str], *args: str) -> Any:
    result = CliRunner().invoke(app, [*args], env=env)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def places(settings, open_store, run_id: str) -> dict[str, float]:
    """Every figure that shows the run's dollars, by where it is shown."""
    env = {"ESCROW_HOME": str(settings.home)}
    listed = {r["id"]: r for r in cli_json(env, "runs", "--json")}
    shown = cli_json(env, "show", run_id, "--json")
    report = cli_json(env, "report", run_id, "--json")
    aggregate = cli_json(env, "report", "--json")  # the test's store holds this run alone
    atif = cli_json(env, "export", run_id, "--format", "atif")
    otel = CliRunner().invoke(app, ["export", run_id, "--format", "otel"], env=env)
    assert otel.exit_code == 0, otel.output
    spans = [s for line in otel.stdout.splitlines() if line.strip()
             for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    otel_cost = sum(a["value"]["doubleValue"] for s in spans for a in s["attributes"] if a["key"] == "escrow.cost_usd")
    store = open_store()
    return {
        "runs": listed[run_id]["totals"]["cost_usd"],
        "show": sum(c["response"]["cost_usd"] for t in shown["turns"] for c in t["calls"] if c["response"]),
        "report": report["total"]["cost_usd"],
        "aggregate": aggregate["total"]["cost_usd"],
        "viewer": run_shown(store.trajectory(run_id)).cost_usd,
        "atif": atif["final_metrics"]["total_cost_usd"],
        "otel": otel_cost,
    }


def priced(settings) -> None:
    set_price(settings.home, "gemma-3-270m", {"input_per_mtok": 1000.0, "cached_input_per_mtok": 100.0,
                                              "output_per_mtok": 2000.0, "gpu_per_hour": 3600.0})


def test_a_retried_cached_run_has_one_cost_everywhere(settings, repo, fault, open_store):
    priced(settings)
    read = tool("read_file", path="calc.py").model_copy(update={"cached_tokens": 7})
    fault.script([Fault.http(503, retry_after=BACKOFF_S), read, EDIT, TEST, SUBMIT])
    outcome = run(settings, repo)
    assert outcome.result.verdict is Verdict.PASS
    calls = open_store().calls(outcome.run_id)
    first = calls[0]
    assert [a.backoff_s for a in first.attempts][0] >= BACKOFF_S  # the backoff was slept...
    assert first.response.cached_input_tokens == 7
    seen = places(settings, open_store, outcome.run_id)
    tally = outcome.result.cost_usd  # the budget check's figure, and run --json's
    # ...it is in the client's clock (total_s) and in no attempt's duration, the GPU seconds charged.
    gpu_s = sum(sum(a.duration_s for a in c.attempts) if c.attempts else c.response.total_s for c in calls)
    assert sum(c.response.total_s for c in calls) - gpu_s >= BACKOFF_S
    assert {name: abs(value - tally) for name, value in seen.items() if abs(value - tally) > TOLERANCE} == {}


def test_a_run_ending_on_a_call_without_usage_has_one_cost_everywhere(settings, repo, fault, open_store):
    priced(settings)
    fault.script([tool("read_file", path="calc.py"), *[Fault.http(503, retry_after=0.1)] * 3])
    outcome = run(settings, repo)
    assert outcome.result.verdict is Verdict.TRANSPORT_FAILURE
    last = open_store().calls(outcome.run_id)[-1]
    assert last.response.input_tokens_source == "absent" and len(last.attempts) == 3
    seen = places(settings, open_store, outcome.run_id)
    tally = outcome.result.cost_usd
    assert tally > 0
    assert {name: abs(value - tally) for name, value in seen.items() if abs(value - tally) > TOLERANCE} == {}


def test_the_one_cost_is_the_formula_of_docs_reports(settings, repo, fault, open_store):
    """The figure everyone shows is the documented one, recomputed here from
    the stored columns: backoff left out, cached tokens at the cached rate."""
    priced(settings)
    fault.script([Fault.http(503, retry_after=BACKOFF_S), Reply(text="no tools", cached_tokens=3)])
    outcome = run(settings, repo)
    expected = 0.0
    for call in open_store().calls(outcome.run_id):
        r = call.response
        cached = min(r.cached_input_tokens, r.input_tokens)
        gpu_s = sum(a.duration_s for a in call.attempts) if call.attempts else r.total_s
        expected += ((r.input_tokens - cached) * 1000.0 + cached * 100.0 + r.output_tokens * 2000.0) / 1e6 + gpu_s
    assert abs(outcome.result.cost_usd - expected) < TOLERANCE


def test_a_cached_count_above_the_prompt_is_counted_clamped_and_reported_as_sent(settings, repo, fault, open_store):
    """The server's raw cached figure is kept beside the clamped one, and
    ``report RUN`` says which call was clamped (text and JSON); the run's one
    cost is the clamped count's, everywhere."""
    priced(settings)
    usage = {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
             "prompt_tokens_details": {"cached_tokens": 150}}
    read = tool("read_file", path="calc.py").model_copy(update={"usage": usage})
    fault.script([read, EDIT, TEST, SUBMIT])
    outcome = run(settings, repo)
    env = {"ESCROW_HOME": str(settings.home)}
    report = cli_json(env, "report", outcome.run_id, "--json")
    assert report["cached_clamps"] == [{"turn": 0, "reported": 150, "counted": 100}]
    assert report["turns"][0]["cached_tokens"] == 100
    text = CliRunner().invoke(app, ["report", outcome.run_id], env={**env, "COLUMNS": "80"}).output
    said = " ".join(text.split())  # prose wraps at the width
    assert "clamped: turn 0, the server reported 150 cached tokens of a 100-token prompt; counted as 100" in said
    assert max(map(len, text.splitlines())) <= 80
    seen = places(settings, open_store, outcome.run_id)
    tally = outcome.result.cost_usd
    assert {name: abs(value - tally) for name, value in seen.items() if abs(value - tally) > TOLERANCE} == {}
    # Unclamped runs list none.
    fault.script([EDIT, TEST, SUBMIT])
    assert cli_json(env, "report", run(settings, repo).run_id, "--json")["cached_clamps"] == []
