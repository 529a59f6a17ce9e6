"""Every real sample (recorded by other agent frameworks, kept in the shared
data folder ../shared/interop, see docs/INTEROP.md) imports, its chain
verifies, and the stored figures are the source's own: summed here from the
raw JSON, not from the parser. Skipped, with the reason, where the files are
absent; tests/interop/test_import_own.py covers every parser without them."""

from __future__ import annotations

import json
import zipfile
from datetime import datetime, timezone

import pytest

from orchestrator.interop import FormatMismatch
from store.write.importer import IMPORTED_VERDICT, import_file
from tests.interop.conftest import REAL_SAMPLES, REPO, real, responses, sha256_of, totals

FORMAT_OF_DIR = {
    "swe-agent": "swe-agent",
    "mini-swe-agent": "mini-swe-agent",
    "openhands": "openhands",
    "openhands-v1": "openhands",
    "inspect": "inspect",
    "atif": "atif",
}


def test_docs_list_every_real_sample_with_its_source():
    """docs/INTEROP.md says where each file comes from; two or more per format."""
    docs = (REPO / "docs" / "INTEROP.md").read_text(encoding="utf-8")
    for relative in REAL_SAMPLES:
        assert f"shared/interop/{relative}" in docs, relative
    for fmt in FORMAT_OF_DIR:
        assert sum(1 for s in REAL_SAMPLES if s.startswith(fmt + "/")) >= 2, fmt


@pytest.mark.parametrize("relative", REAL_SAMPLES)
def test_each_sample_imports_as_verified_import_runs(store, relative):
    path = real(relative)
    outcome = import_file(store, path)
    assert outcome.format == FORMAT_OF_DIR[relative.split("/")[0]]
    assert outcome.run_ids and not outcome.skipped
    for run_id in outcome.run_ids:
        run = store.run(run_id)
        assert run.mode == "import" and run.verdict == IMPORTED_VERDICT
        assert run.config["import"]["sha256"] == sha256_of(path)
        assert run.config["import"]["format"] == outcome.format and run.config["import"]["version"]
        assert store.verify(run_id).ok
        assert store.calls(run_id), "every sample has model calls"


def test_atif_figures_are_the_step_metrics(store):
    path = real("atif/doku.terminus2.trajectory.json")
    raw = json.loads(path.read_bytes())
    agent = [s for s in raw["steps"] if s["source"] == "agent"]
    run_id = import_file(store, path).run_ids[0]
    got = responses(store, run_id)
    assert [r.input_tokens for r in got] == [s["metrics"]["prompt_tokens"] for s in agent]
    assert [r.output_tokens for r in got] == [s["metrics"]["completion_tokens"] for s in agent]
    assert [r.cached_input_tokens for r in got] == [s["metrics"].get("cached_tokens", 0) for s in agent]
    assert [r.cost_usd for r in got] == [s["metrics"].get("cost_usd") for s in agent]
    results = sum(len(s.get("observation", {}).get("results", [])) for s in raw["steps"])
    assert len(store.tool_executions(run_id)) == results


def test_absent_figures_are_marked_absent_not_zero_from_the_source(store):
    # The ATIF-v1.2 file has no cached_tokens: the prompt is the server's, the cache figure absent.
    run_id = import_file(store, real("atif/charset_normalizer.trajectory.json")).run_ids[0]
    for r in responses(store, run_id):
        assert (r.input_tokens_source, r.output_tokens_source, r.cached_input_tokens_source) == (
            "server",
            "server",
            "absent",
        )
    # SWE-agent records no per-call usage at all; its run totals are kept in the import event.
    path = real("swe-agent/swe-agent__test-repo-i1.traj")
    run_id = import_file(store, path).run_ids[0]
    for r in responses(store, run_id):
        assert (r.input_tokens, r.input_tokens_source, r.output_tokens_source) == (0, "absent", "absent")
    [event] = store.events(run_id, "import")
    assert event.data["info"]["model_stats"] == json.loads(path.read_bytes())["info"]["model_stats"]


def test_one_run_in_two_formats_imports_to_the_same_figures(store):
    """Harbor converted this mini-swe-agent run to ATIF: both give the same tokens."""
    a = import_file(store, real("mini-swe-agent/charset_normalizer.mini-swe-agent.trajectory.json")).run_ids
    b = import_file(store, real("atif/charset_normalizer.trajectory.json")).run_ids
    assert totals(store, a) == totals(store, b)
    raw = json.loads(real("atif/charset_normalizer.trajectory.json").read_bytes())
    assert totals(store, a)["prompt"] == raw["final_metrics"]["total_prompt_tokens"]
    assert totals(store, a)["completion"] == raw["final_metrics"]["total_completion_tokens"]


def test_mini_swe_agent_keeps_every_message(store):
    path = real("mini-swe-agent/github_issue.traj.json")
    raw = json.loads(path.read_bytes())
    run_id = import_file(store, path).run_ids[0]
    calls, turns = store.calls(run_id), store.turns(run_id)
    first_request = calls[0].request().messages
    kept = list(first_request) + [m for t in turns for m in t.messages()]
    assert [(m.role, m.content) for m in kept] == [(m["role"], m["content"]) for m in raw]
    assert len(calls) == sum(1 for m in raw if m["role"] == "assistant")


def test_inspect_usage_is_each_model_event_s(store):
    path = real("inspect/custom.eval")
    with zipfile.ZipFile(path) as z:
        raw = json.loads(z.read("samples/1_epoch_1.json"))
    usages = [e["output"]["usage"] for e in raw["events"] if e["event"] == "model"]
    run_id = import_file(store, path).run_ids[0]
    got = responses(store, run_id)
    assert [r.input_tokens for r in got] == [u["input_tokens"] + u.get("input_tokens_cache_read", 0) for u in usages]
    assert [r.output_tokens for r in got] == [u["output_tokens"] for u in usages]
    per_model = raw["model_usage"]["openai/gpt-4o-mini"]
    assert totals(store, [run_id])["prompt"] == per_model["input_tokens"]
    # Attachments are resolved: the stored assistant text is the real answer, not a reference.
    assert "attachment://" not in (got[0].envelope().payload.text)


def test_inspect_log_with_many_samples_is_one_run_per_sample(store):
    path = real("inspect/2025-02-11T15-17-00-05-00_popularity_dPiJifoWeEQBrfWsAopzWr.eval")
    with zipfile.ZipFile(path) as z:
        n = sum(1 for name in z.namelist() if name.startswith("samples/"))
    assert len(import_file(store, path).run_ids) == n


def test_openhands_usage_is_each_model_response_once(store):
    path = real("openhands/wrong_initial_state.json")
    raw = json.loads(path.read_bytes())
    seen = {}
    for event in raw:
        response = (event.get("tool_call_metadata") or {}).get("model_response")
        if response:
            seen[response["id"]] = response["usage"]
    run_id = import_file(store, path).run_ids[0]
    got = totals(store, [run_id])
    assert got["calls"] == len(seen)
    assert got["prompt"] == sum(u["prompt_tokens"] for u in seen.values())
    assert got["cached"] == sum(u["prompt_tokens_details"]["cached_tokens"] for u in seen.values())
    tool_ids = {c.tool_call_id for c in store.candidates(run_id)}
    assert tool_ids <= {
        json.loads(json.dumps(e))["tool_call_metadata"]["tool_call_id"] for e in raw if e.get("tool_call_metadata")
    } | {None}


def test_swe_agent_actions_become_tool_executions(store):
    path = real("swe-agent/6e44b9__sweagenttestrepo-1c2844.traj")
    raw = json.loads(path.read_bytes())
    run_id = import_file(store, path).run_ids[0]
    executions = store.tool_executions(run_id)
    assert len(store.calls(run_id)) == len(raw["trajectory"]) == raw["info"]["model_stats"]["api_calls"]
    assert [e.decision for e in executions] == [None] * len(executions), "no ACL decision was made on imported actions"
    assert executions[0].tool_name == "find_file"


@pytest.mark.parametrize("conversation", ["3fdb316098bb48e1aa029ce56805792a", "cd94562403b9487ebdd4018e3f531dfd"])
def test_openhands_v1_folder_calls_are_its_responses_with_the_state_s_usage(store, conversation):
    folder = real(f"openhands-v1/{conversation}")
    events = [json.loads(p.read_bytes()) for p in sorted((folder / "events").glob("event-*.json"))]
    state = json.loads((folder / "base_state.json").read_bytes())
    usage = {u["response_id"]: u for m in state["stats"]["usage_to_metrics"].values() for u in m["token_usages"]}
    response_ids = list(dict.fromkeys(e["llm_response_id"] for e in events if e.get("llm_response_id")))
    run_id = import_file(store, folder).run_ids[0]
    got = responses(store, run_id)
    assert len(got) == len(response_ids)
    for r, rid in zip(got, response_ids, strict=True):
        if rid in usage:
            assert (r.input_tokens, r.cached_input_tokens, r.output_tokens) == (
                usage[rid]["prompt_tokens"], usage[rid]["cache_read_tokens"], usage[rid]["completion_tokens"])
        else:  # a response the state has no usage for: absent, not 0 from the source
            assert r.input_tokens_source == "absent"
    observations = [e for e in events if e["kind"] == "ObservationEvent"]
    executions = store.tool_executions(run_id)
    assert [e.tool_name for e in executions] == [o["tool_name"] for o in observations]
    assert {c.tool_call_id for c in store.candidates(run_id)} == {o["tool_call_id"] for o in observations}
    system = [e for e in events if e["kind"] in ("SystemPromptEvent", "SystemPromptUpdateEvent")]
    first_request = store.calls(run_id)[0].request().messages
    assert first_request[0].role == "system" and len(system) >= 1
    assert store.run(run_id).created_at == pytest.approx(min(
        datetime.fromisoformat(e["timestamp"]).replace(tzinfo=timezone.utc).timestamp() for e in events))


def test_a_folder_that_is_no_conversation_is_refused(store, tmp_path):
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "notes.json").write_text("{}")
    with pytest.raises(FormatMismatch, match="not an OpenHands V1 conversation folder"):
        import_file(store, tmp_path)


@pytest.mark.parametrize("relative", [
    "mini-swe-agent/deepseek_lite_dev__sqlfluff__sqlfluff-2419.traj.json",
    "mini-swe-agent/deepseek_reasoner_dev__pvlib__pvlib-python-1606.traj.json",
])
def test_mini_swe_agent_v2_tool_calls_results_usage_reasoning_and_exit(store, relative):
    path = real(relative)
    raw = json.loads(path.read_bytes())
    assistant = [m for m in raw["messages"] if m["role"] == "assistant"]
    run_id = import_file(store, path).run_ids[0]
    got = responses(store, run_id)
    usage = [m["extra"]["response"]["usage"] for m in assistant]
    assert [r.input_tokens for r in got] == [u["prompt_tokens"] for u in usage]
    assert [r.cached_input_tokens for r in got] == [u["prompt_tokens_details"]["cached_tokens"] for u in usage]
    assert [r.cost_usd for r in got] == [m["extra"]["cost"] for m in assistant]
    assert [[c.id for c in r.envelope().payload.tool_calls] for r in got] == [
        [c["id"] for c in m.get("tool_calls") or []] for m in assistant]
    tool_results = [m for m in raw["messages"] if m["role"] == "tool"]
    assert sorted(c.tool_call_id for c in store.candidates(run_id)) == sorted(m["tool_call_id"] for m in tool_results)
    assert [e.exit_code for e in store.tool_executions(run_id)] == [m["extra"]["returncode"] for m in tool_results]
    reasoning = [e.data["text"] for e in store.events(run_id, "source_reasoning")]
    assert reasoning == [m["reasoning_content"] for m in assistant if m.get("reasoning_content")]
    [exit_message] = [m for m in raw["messages"] if m["role"] == "exit"]
    assert exit_message["extra"]["exit_status"] in store.run(run_id).verdict_detail
    assert store.run(run_id).request_model == raw["info"]["config"]["model"]["model_name"]
