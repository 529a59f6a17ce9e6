"""``escrow export --format atif``: every run exports to a document that
validates against the ATIF version it declares, and imports back to the same
figures (round trip), for imported runs and Escrow's own."""

from __future__ import annotations

import json

import pytest

from orchestrator.composition.launch.reports import report_run
from orchestrator.interop import atif_schema
from policies.price_table import PriceTable
from store import Recorder
from store.read.reports.atif_export import to_atif
from store.write import synthetic
from store.write.importer import import_file
from tests.interop.conftest import OWN_FILES, REAL_SAMPLES, own, real


def figures(store, run_id):
    out = []
    for call in store.calls(run_id):
        r = call.response
        out.append(
            (
                r.input_tokens,
                r.input_tokens_source,
                r.cached_input_tokens,
                r.cached_input_tokens_source,
                r.output_tokens,
                r.output_tokens_source,
                r.cost_usd,
                r.envelope().payload.text,
                [
                    (c.name, json.loads(c.arguments) if c.arguments.startswith("{") else c.arguments)
                    for c in r.envelope().payload.tool_calls
                ],
            )
        )
    return out


def observations(store, run_id):
    return [e.observation for e in store.tool_executions(run_id)]


def round_trip(store, tmp_path, run_id):
    document = to_atif(store.trajectory(run_id))
    parsed = atif_schema.Trajectory.model_validate(document)
    assert parsed.schema_version == document["schema_version"] == atif_schema.LATEST
    path = tmp_path / f"{run_id}.atif.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    [back] = import_file(store, path).run_ids
    return document, back


@pytest.mark.parametrize(
    "path_of, relative",
    [(own, r) for r in OWN_FILES] + [(real, r) for r in REAL_SAMPLES],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_imported_runs_round_trip_through_atif(store, tmp_path, path_of, relative):
    """Escrow's own fixtures always; the real samples where they are present."""
    for run_id in import_file(store, path_of(relative)).run_ids[:3]:
        document, back = round_trip(store, tmp_path, run_id)
        assert figures(store, back) == figures(store, run_id)
        assert observations(store, back) == observations(store, run_id)
        assert store.verify(back).ok
        # The export's final_metrics carry the run-level figures that count, so both report the same totals.
        a, b = (report_run(store, r, PriceTable(version="t", sources=(), prices={})).total for r in (run_id, back))
        assert (a.prompt_tokens, a.completion_tokens) == (b.prompt_tokens, b.completion_tokens)
        assert a.cost.total_usd == pytest.approx(b.cost.total_usd)


def test_a_second_conversation_keeps_its_opening_messages(store, tmp_path):
    """Sample 1 of arith.eval: the solver's calls, then the scorer's on a conversation of its own."""
    run_id = import_file(store, own("inspect/arith.eval")).run_ids[0]
    calls = store.calls(run_id)
    assert calls[0].request().messages[0] != calls[2].request().messages[0]
    document = to_atif(store.trajectory(run_id))
    texts = [s["message"] for s in document["steps"]]
    assert calls[2].request().messages[0].content in texts


def test_escrow_runs_round_trip_through_atif(store, tmp_path):
    run_id = synthetic.record_run(Recorder(store), turns=4, seed=3)
    document, back = round_trip(store, tmp_path, run_id)
    assert [s["source"] for s in document["steps"]].count("agent") == len(store.calls(run_id))
    assert figures(store, back) == figures(store, run_id)
    assert document["final_metrics"]["total_prompt_tokens"] == sum(c.response.input_tokens for c in store.calls(run_id))


def test_absent_figures_are_left_out_not_written_as_zero(store, tmp_path):
    run_id = import_file(store, own("swe-agent/slugify_v1.traj")).run_ids[0]
    document = to_atif(store.trajectory(run_id))
    agent_steps = [s for s in document["steps"] if s["source"] == "agent" and not s.get("is_copied_context")]
    assert agent_steps and all("metrics" not in s for s in agent_steps)


def test_run_level_totals_are_the_export_s_final_metrics(store):
    path = real("swe-agent/swe-agent__test-repo-i1.traj")
    stats = json.loads(path.read_bytes())["info"]["model_stats"]
    final = to_atif(store.trajectory(import_file(store, path).run_ids[0]))["final_metrics"]
    assert (final["total_prompt_tokens"], final["total_completion_tokens"]) == (
        stats["tokens_sent"], stats["tokens_received"])
    assert final["total_cost_usd"] == pytest.approx(stats["instance_cost"])


def test_schema_refuses_what_the_rfc_forbids():
    good = json.loads(own("atif/terminal_v1_6.json").read_bytes())
    atif_schema.Trajectory.model_validate(good)
    for breaking in (
        lambda d: d["steps"][0].update(metrics={"prompt_tokens": 1}),  # agent-only field on a system step
        lambda d: d["steps"][1].update(step_id=9),
        lambda d: d["steps"][1].update(timestamp="yesterday at ten"),
        lambda d: d["steps"][2]["observation"]["results"][0].update(source_call_id="no-such-call"),
        lambda d: d.update(unknown_field=1),
        lambda d: d.update(schema_version="ATIF-v2.0"),
        lambda d: d["steps"].clear(),
    ):
        bad = json.loads(json.dumps(good))
        breaking(bad)
        with pytest.raises(ValueError):
            atif_schema.Trajectory.model_validate(bad)
