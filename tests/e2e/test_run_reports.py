"""Reports and exports over a run made by the real loop (fault server, Docker,
SQLite), priced from the price table as the run went."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from cli.main import app
from orchestrator.agent import Verdict
from policies.price_table import set_price
from tests.e2e.test_run_faults import EDIT, READ, SUBMIT, TEST, run


def test_a_priced_live_run_reports_and_exports(settings, repo, fault, open_store):
    set_price(
        settings.home, "gemma-3-270m", {"input_per_mtok": 1.0, "cached_input_per_mtok": 0.1, "output_per_mtok": 2.0}
    )
    fault.script([READ, EDIT, TEST, SUBMIT])
    outcome = run(settings, repo)
    assert outcome.result.verdict is Verdict.PASS

    store = open_store()
    responses = [c.response for c in store.calls(outcome.run_id)]
    envelopes = [r.envelope() for r in responses]
    expected = sum(
        (e.usage.prompt_tokens - e.usage.cached_prompt_tokens) * 1.0 + e.usage.cached_prompt_tokens * 0.1
        + e.usage.completion_tokens * 2.0 for e in envelopes
    ) / 1e6
    # The loop priced each call as it went, with the same table the report uses.
    assert abs(outcome.result.cost_usd - expected) < 1e-12 and expected > 0
    assert abs(sum(r.cost_usd for r in responses) - expected) < 1e-12

    env = {"ESCROW_HOME": str(settings.home)}
    report = CliRunner().invoke(app, ["report", outcome.run_id, "--json"], env=env)
    assert report.exit_code == 0, report.output
    data = json.loads(report.stdout)
    text = json.dumps(data)
    assert str(sum(e.usage.prompt_tokens for e in envelopes)) in text
    assert outcome.run_id in text

    export = CliRunner().invoke(app, ["export", outcome.run_id, "--format", "messages-jsonl"], env=env)
    assert export.exit_code == 0, export.output
    (line,) = [json.loads(x) for x in export.stdout.splitlines() if x.strip()]
    roles = [m["role"] for m in line["messages"]]
    assert roles[:2] == ["system", "user"] and "tool" in roles
    # The loop's status tail, which ends every request, is no message of the conversation.
    final = store.calls(outcome.run_id)[-1].request()
    assert str(final.messages[-1].content).startswith("[turns left:")
    assert not [m for m in line["messages"] if str(m.get("content") or "").startswith("[turns left:")]
    assert [m["role"] for m in line["messages"][:len(final.messages) - 1]] == [m.role for m in final.messages[:-1]]
    calls = [c for m in line["messages"] for c in (m.get("tool_calls") or [])]
    assert [c["function"]["name"] for c in calls] == ["read_file", "edit_file", "bash", "submit"]
    assert (
        isinstance(calls[1]["function"]["arguments"], dict) and calls[1]["function"]["arguments"]["path"] == "calc.py"
    )
