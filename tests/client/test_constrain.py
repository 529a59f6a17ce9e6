"""``--constrain``: what the probed engine is sent, over loopback against the
fault server posing as vLLM, SGLang or llama.cpp (their documented request
fields), recorded with the request, replayed byte for byte; an engine that
ignores the grammar still ends in a parse rejection, recorded as not honoured
and counted by the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.adapters.fault_server import FaultServer, Reply
from orchestrator.composition.launch.compose import ModelProbe, resolve_constraint
from orchestrator.composition.launch.reports import report_run
from orchestrator.errors import ConfigError
from orchestrator.grammar import NOT_HONOURED, tool_grammar
from orchestrator.replay import Replayer
from orchestrator.settings import Settings
from orchestrator.toolset import tool_specs
from policies import default_policy
from policies.price_table import PriceTable
from store import Store
from tests.replay.recording import record_memory_run

VLLM = {"/version": {"version": "0.11.0"}}
VLLM_OLD = {"/version": {"version": "0.9.2"}}
SGLANG = {"/get_server_info": {"version": "0.5.2", "context_length": 32768}}
LLAMA = {"/props": {"build_info": "b11434-abcdef", "default_generation_settings": {"n_ctx": 2048}}}
CALL = '<tool name="read_file">{"path": "calc.py"}</tool>'
SUBMIT = '<tool name="submit">{}</tool>'


def settings(srv: FaultServer, tmp: Path, **fields: object) -> Settings:
    values: dict[str, object] = dict(home=tmp, model_url=srv.base_url, model=srv.model, tokenizer="cl100k_base",
                                     tool_protocol="text")
    values.update(fields)
    return Settings(**values)  # type: ignore[arg-type]


def choose(srv: FaultServer, tmp: Path, **fields: object):
    probe = ModelProbe(settings(srv, tmp, **fields))
    try:
        policy = default_policy()
        return resolve_constraint(settings(srv, tmp, **fields), policy, tool_specs(policy.tools.allowed), probe)
    finally:
        probe.close()


def run_constrained(srv: FaultServer, store: Store, steps: list, constraint) -> str:
    return record_memory_run(store, srv, steps, protocol="text", stop=("</tool>",), constraint=constraint)


def chat_bodies(srv: FaultServer) -> list[dict]:
    return [r.json for r in srv.requests if r.path.endswith("/chat/completions")]


@pytest.mark.parametrize(("endpoints", "field"), [
    (VLLM, lambda body: body["structured_outputs"]["grammar"]),
    (VLLM_OLD, lambda body: body["guided_grammar"]),
    (SGLANG, lambda body: body["ebnf"]),
    (LLAMA, lambda body: body["grammar"]),
])
def test_each_engine_is_sent_the_grammar_in_its_dialect_and_the_record_keeps_it(endpoints, field, tmp_path):
    with FaultServer(endpoints=endpoints) as srv, Store.open(f"sqlite:///{tmp_path / 'e.db'}") as store:
        # auto where the probe says the engine can; llama.cpp is asked for
        # (auto leaves it off until a real model is seen honouring it).
        choice = choose(srv, tmp_path, **({"constrain": "tools"} if endpoints is LLAMA else {}))
        assert choice.constraint is not None and choice.constraint.kind == "grammar"
        srv.reset()
        run_id = run_constrained(srv, store, [Reply(text=CALL), Reply(text=SUBMIT)], choice.constraint)
        grammar = tool_grammar(tool_specs(default_policy().tools.allowed)).text
        bodies = chat_bodies(srv)
        assert len(bodies) >= 2 and all(field(body) == grammar for body in bodies)
        for call in store.calls(run_id):
            recorded = json.loads(call.request_json)
            assert recorded["constraint"]["fields"] == choice.constraint.fields
        assert not [e for t in store.trajectory(run_id).turns for e in t.events if e.kind == NOT_HONOURED]


def test_native_calls_are_constrained_with_tool_choice_required(tmp_path):
    with FaultServer(endpoints=VLLM) as srv:
        choice = choose(srv, tmp_path, tool_protocol="native")
        assert choice.constraint is not None and choice.constraint.fields == {"tool_choice": "required"}


def test_off_sends_nothing_and_auto_says_why_where_the_engine_cannot(tmp_path):
    with FaultServer(endpoints=VLLM) as srv:
        off = choose(srv, tmp_path, constrain="off")
        assert off.constraint is None and off.why == "asked"
    with FaultServer() as srv:  # answers like any OpenAI-compatible server
        auto = choose(srv, tmp_path)
        assert auto.constraint is None and "no constrained decoding" in auto.why
        with pytest.raises(ConfigError, match="--constrain off"):
            choose(srv, tmp_path, constrain="tools")


def test_auto_constrains_llama_server(tmp_path):
    """llama-server honours the grammar with a real model
    (test_constrain_llama.py): ``auto`` asks for it."""
    grammar = tool_grammar(tool_specs(default_policy().tools.allowed)).text
    with FaultServer(endpoints=LLAMA) as srv:
        auto = choose(srv, tmp_path)
        assert auto.constraint is not None and auto.constraint.fields == {"grammar": grammar}, auto.why


def test_the_policy_key_decides_when_the_setting_is_unset(tmp_path):
    policy = default_policy()
    off_policy = policy.model_copy(update={"tools": policy.tools.model_copy(update={"constrain": "off"})})
    with FaultServer(endpoints=LLAMA) as srv:
        probe = ModelProbe(settings(srv, tmp_path))
        try:
            specs = tool_specs(policy.tools.allowed)
            assert resolve_constraint(settings(srv, tmp_path), off_policy, specs, probe).constraint is None
            assert resolve_constraint(settings(srv, tmp_path, constrain="tools"), off_policy, specs,
                                      probe).constraint is not None
        finally:
            probe.close()


def test_an_ignored_grammar_still_ends_in_a_parse_rejection_recorded_as_not_honoured(tmp_path):
    with FaultServer(endpoints=LLAMA) as srv, Store.open(f"sqlite:///{tmp_path / 'e.db'}") as store:
        choice = choose(srv, tmp_path, constrain="tools")
        srv.reset()
        # What the demo got: the server dropped the grammar.
        broken = '<tool name="list_files">{"path": "."}iatrics <tool name="list_files">{}</tool>'
        run_id = run_constrained(srv, store, [Reply(text=broken), Reply(text="done, I think"), Reply(text=SUBMIT)],
                                 choice.constraint)
        trajectory = store.trajectory(run_id)
        events = [(t.turn, e.data) for t in trajectory.turns for e in t.events if e.kind == NOT_HONOURED]
        assert [(turn, d["layer"], d["call_index"]) for turn, d in events] == [(0, "parse", 0), (1, "no_call", None)]
        rejected = [c for t in trajectory.turns for c in t.candidates if c.transitions
                    and c.transitions[-1].to_state == "REJECTED"]
        assert rejected and rejected[0].transitions[-1].layer == "parse"
        report = report_run(store, run_id, _prices())
        assert report.constraint is not None
        calls = len(store.calls(run_id))
        assert calls >= 3 and (report.constraint.calls, report.constraint.not_honoured) == (calls, 2)
    from typer.testing import CliRunner

    from cli.main import app

    db = f"sqlite:///{tmp_path / 'e.db'}"
    runner = CliRunner()
    shown = runner.invoke(app, ["report", run_id, "--db", db, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["constraint"] == {"kind": "grammar", "engine": "llama.cpp", "calls": calls,
                                                      "not_honoured": 2, "loosened": len(choice.constraint.loosened)}
    text = runner.invoke(app, ["report", run_id, "--db", db]).stdout
    assert f"constrained grammar (llama.cpp) on {calls} call(s); not honoured 2" in " ".join(text.split())
    show = runner.invoke(app, ["show", run_id, "--db", db, "--full"]).stdout
    assert "constrain: grammar (llama.cpp, sent as grammar)" in show and NOT_HONOURED in show


def test_a_mistyped_constrain_is_a_usage_error(tmp_path):
    import os
    import subprocess
    import sys

    escrow = str(Path(sys.executable).with_name("escrow"))
    done = subprocess.run([escrow, "run", "x", "--repo", str(tmp_path), "--verify", "true", "--constrain", "always",
                           "--model-url", "http://127.0.0.1:9/v1"], capture_output=True, text=True,
                          env={**os.environ, "ESCROW_HOME": str(tmp_path / "home")})
    assert done.returncode == 2 and "constrain" in done.stderr and "Traceback" not in done.stderr


def test_an_unconstrained_run_records_no_constraint_and_no_event(tmp_path):
    with FaultServer() as srv, Store.open(f"sqlite:///{tmp_path / 'e.db'}") as store:
        run_id = record_memory_run(store, srv, [Reply(text="no call"), Reply(text=SUBMIT)], protocol="text")
        assert all("constraint" not in json.loads(c.request_json) for c in store.calls(run_id))
        assert not [e for t in store.trajectory(run_id).turns for e in t.events if e.kind == NOT_HONOURED]
        assert report_run(store, run_id, _prices()).constraint is None


def test_a_constrained_run_replays_identically(tmp_path):
    with FaultServer(endpoints=SGLANG) as srv, Store.open(f"sqlite:///{tmp_path / 'e.db'}") as store:
        choice = choose(srv, tmp_path)
        srv.reset()
        run_id = run_constrained(srv, store, [Reply(text=CALL), Reply(text="x <tool"), Reply(text=SUBMIT)],
                                 choice.constraint)
        replayer = Replayer(store)
        report = replayer.offline(replayer.load(run_id))
        assert report.identical, report.divergence
        assert [t.replayed_sha256 for t in report.turns] == [c.request_sha256 for c in store.calls(run_id)]


def _prices() -> PriceTable:
    from policies.price_table import load_price_table

    return load_price_table(Path("/nonexistent-escrow-home"))


def test_a_call_cut_mid_json_by_the_output_ceiling_is_truncated_as_without_a_grammar(tmp_path):
    from orchestrator.adapters.fault_server import Fault

    with FaultServer(endpoints=LLAMA) as srv, Store.open(f"sqlite:///{tmp_path / 'e.db'}") as store:
        choice = choose(srv, tmp_path)
        srv.reset()
        cut = Fault.truncated('<tool name="read_file">{"path": "ca')
        run_id = run_constrained(srv, store, [cut, Reply(text=SUBMIT)], choice.constraint)
        first = store.trajectory(run_id).turns[0]
        assert first.calls[0].response is not None and first.calls[0].response.status == "TRUNCATED"
        assert not first.candidates  # quarantined: never staged, never executed
        assert not [e for e in first.events if e.kind == NOT_HONOURED]
