"""Every parser on Escrow's own fixtures (tests/data/interop): each file
imports to verified runs, the stored figures are the file's own (summed here
from the raw JSON, not by the parser), absent figures are marked absent, and
every message and action is kept."""

from __future__ import annotations

import json
import zipfile

import pytest

from store.write.importer import IMPORTED_VERDICT, import_file
from tests.interop.conftest import OWN_FILES, own, responses, sha256_of, totals

VERSIONS = {
    "atif/slugify_v1_2.json": "ATIF-v1.2",
    "atif/terminal_v1_6.json": "ATIF-v1.6",
    "inspect/arith.eval": "2",
    "mini-swe-agent/messages.traj.json": "message-list",
    "mini-swe-agent/slugify_v1.json": "mini-swe-agent-1",
    "mini-swe-agent/slugify_v2.json": "mini-swe-agent-1.1",
    "openhands/hello_events.json": "v0-event-list",
    "swe-agent/listing_v0.traj": "0",
    "swe-agent/slugify_v1.traj": "1",
}


def raw(relative: str):
    return json.loads(own(relative).read_bytes())


def sample_of(relative: str, member: str):
    with zipfile.ZipFile(own(relative)) as archive:
        return json.loads(archive.read(member))


def sources(store, run_id):
    return [
        (r.input_tokens_source, r.cached_input_tokens_source, r.output_tokens_source) for r in responses(store, run_id)
    ]


@pytest.mark.parametrize("relative", OWN_FILES)
def test_each_fixture_imports_as_verified_import_runs_of_its_format_and_version(store, relative):
    path = own(relative)
    outcome = import_file(store, path)
    assert (outcome.format, outcome.version) == (relative.split("/")[0], VERSIONS[relative])
    assert outcome.run_ids and not outcome.skipped
    for run_id in outcome.run_ids:
        run = store.run(run_id)
        assert run.mode == "import" and run.verdict == IMPORTED_VERDICT
        assert run.config["import"]["sha256"] == sha256_of(path)
        assert store.verify(run_id).ok
        assert store.calls(run_id)


def test_atif_figures_are_the_step_metrics_and_absent_ones_are_marked(store):
    doc = raw("atif/terminal_v1_6.json")
    agent = [s for s in doc["steps"] if s["source"] == "agent"]
    run_id = import_file(store, own("atif/terminal_v1_6.json")).run_ids[0]
    got = responses(store, run_id)
    assert [(r.input_tokens, r.cached_input_tokens, r.output_tokens, r.cost_usd) for r in got] == [
        (
            s["metrics"]["prompt_tokens"],
            s["metrics"]["cached_tokens"],
            s["metrics"]["completion_tokens"],
            s["metrics"]["cost_usd"],
        )
        for s in agent
    ]
    assert sources(store, run_id) == [("server", "server", "server")] * len(agent)
    assert len(store.tool_executions(run_id)) == sum(
        len(s.get("observation", {}).get("results", [])) for s in doc["steps"]
    )
    [event] = store.events(run_id, "import")
    assert event.data["info"]["final_metrics"]["total_cached_tokens"] == doc["final_metrics"]["total_cached_tokens"]
    # ATIF-v1.2 file without cached_tokens: the cache figure is absent, not a server 0.
    v12 = import_file(store, own("atif/slugify_v1_2.json")).run_ids[0]
    assert sources(store, v12) == [("server", "absent", "server")] * 3


def test_one_run_in_two_formats_imports_to_the_same_figures(store):
    """slugify_v1_2.json is slugify_v1.json's run written in ATIF."""
    mini = import_file(store, own("mini-swe-agent/slugify_v1.json")).run_ids
    atif = import_file(store, own("atif/slugify_v1_2.json")).run_ids
    assert totals(store, mini) == totals(store, atif)
    final = raw("atif/slugify_v1_2.json")["final_metrics"]
    assert (totals(store, mini)["prompt"], totals(store, mini)["completion"]) == (
        final["total_prompt_tokens"],
        final["total_completion_tokens"],
    )


def test_mini_swe_agent_v1_and_v2_usage_cost_and_actions(store):
    doc = raw("mini-swe-agent/slugify_v2.json")
    assistants = [m for m in doc["messages"] if m["role"] == "assistant"]
    run_id = import_file(store, own("mini-swe-agent/slugify_v2.json")).run_ids[0]
    got = responses(store, run_id)
    assert [(r.input_tokens, r.output_tokens, r.cost_usd) for r in got] == [
        (
            m["extra"]["response"]["usage"]["prompt_tokens"],
            m["extra"]["response"]["usage"]["completion_tokens"],
            m["extra"]["cost"],
        )
        for m in assistants
    ]
    assert sources(store, run_id) == [("server", "absent", "server")] * len(assistants)
    executions = store.tool_executions(run_id)
    observed = [m for m in doc["messages"] if m["role"] == "user" and "returncode" in m.get("extra", {})]
    assert [json.loads(e.arguments_json)["action"] for e in executions] == [
        m["extra"]["actions"][0]["command"] for m in assistants[:2]
    ]
    assert [(e.exit_code, e.observation) for e in executions] == [
        (m["extra"]["returncode"], m["content"]) for m in observed
    ]
    # v1 keeps no per-call cost: absent, not 0.
    v1 = import_file(store, own("mini-swe-agent/slugify_v1.json")).run_ids[0]
    assert [r.cost_usd for r in responses(store, v1)] == [None] * 3


def test_mini_swe_agent_message_list_keeps_every_message(store):
    doc = raw("mini-swe-agent/messages.traj.json")
    run_id = import_file(store, own("mini-swe-agent/messages.traj.json")).run_ids[0]
    calls, turns = store.calls(run_id), store.turns(run_id)
    kept = list(calls[0].request().messages) + [m for t in turns for m in t.messages()]
    assert [(m.role, m.content) for m in kept] == [(m["role"], m["content"]) for m in doc]
    assert sources(store, run_id) == [("absent", "absent", "absent")] * 2


def test_inspect_usage_attachments_scorer_and_one_run_per_sample(store):
    sample = sample_of("inspect/arith.eval", "samples/1_epoch_1.json")
    usages = [e["output"]["usage"] for e in sample["events"] if e["event"] == "model"]
    outcome = import_file(store, own("inspect/arith.eval"))
    assert len(outcome.run_ids) == 2, "one run per sample"
    run_id = outcome.run_ids[0]
    got = responses(store, run_id)
    # Inspect's input_tokens exclude the cache reads: Escrow's prompt is their sum.
    assert [(r.input_tokens, r.cached_input_tokens, r.output_tokens) for r in got] == [
        (
            u["input_tokens"] + u.get("input_tokens_cache_read", 0),
            u.get("input_tokens_cache_read", 0),
            u["output_tokens"],
        )
        for u in usages
    ]
    assert totals(store, [run_id])["prompt"] == sum(
        v
        for k, v in sample["model_usage"]["openai/gpt-4o-mini"].items()
        if k in ("input_tokens", "input_tokens_cache_read")
    )
    assert got[1].envelope().payload.text == next(iter(sample["attachments"].values()))
    assert [c.response.envelope().payload.tool_calls[0].name for c in store.calls(run_id)[:1]] == ["calc"]
    [execution] = store.tool_executions(run_id)
    assert execution.tool_name == "calc" and execution.observation == "391"
    calls = store.calls(run_id)
    assert calls[2].request().messages[0].content.startswith("Target: 391"), (
        "the scorer's call opens its own conversation"
    )
    assert [e.data["text"] for e in store.events(run_id, "source_reasoning")] == ["Multiply with the tool."]


def test_openhands_usage_is_each_model_response_once_and_the_system_action_is_a_system_message(store):
    doc = raw("openhands/hello_events.json")
    seen = {}
    for event in doc:
        response = (event.get("tool_call_metadata") or {}).get("model_response")
        if response:
            seen[response["id"]] = response["usage"]
    run_id = import_file(store, own("openhands/hello_events.json")).run_ids[0]
    got = totals(store, [run_id])
    assert got["calls"] == len(seen) == 3, "two actions of one response are one call"
    assert got["prompt"] == sum(u["prompt_tokens"] for u in seen.values())
    assert got["cached"] == sum(u["prompt_tokens_details"]["cached_tokens"] for u in seen.values())
    first = store.calls(run_id)[0].request().messages
    assert [m.role for m in first] == ["system", "user"]
    executions = store.tool_executions(run_id)
    assert [e.tool_name for e in executions] == ["execute_bash"] * 3
    assert [e.observation for e in executions] == ["", "hi", "hi.py"]


def test_swe_agent_actions_become_tool_executions_and_usage_is_absent(store):
    doc = raw("swe-agent/slugify_v1.traj")
    run_id = import_file(store, own("swe-agent/slugify_v1.traj")).run_ids[0]
    executions = store.tool_executions(run_id)
    assert len(store.calls(run_id)) == len(doc["trajectory"]) == doc["info"]["model_stats"]["api_calls"]
    assert [e.tool_name for e in executions] == ["find_file", "edit", "submit"]
    assert [e.decision for e in executions] == [None] * 3, "no ACL decision was made on imported actions"
    assert sources(store, run_id) == [("absent", "absent", "absent")] * 3
    [event] = store.events(run_id, "import")
    assert event.data["info"]["model_stats"] == doc["info"]["model_stats"]
    assert store.run(run_id).config["import"]["source_id"] == doc["environment"]
    v0 = import_file(store, own("swe-agent/listing_v0.traj")).run_ids[0]
    assert [e.tool_name for e in store.tool_executions(v0)] == ["ls", "submit"]
