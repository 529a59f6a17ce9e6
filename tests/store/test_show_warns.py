"""Issue 42, group 12: ``show`` does not mislead. A run whose hash chain
does not verify is shown with a warning first (it read as a clean PASS), and
the engine probe's event is one line, not five of noise in every header."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from store import Recorder, Store


def test_show_warns_of_a_broken_chain_and_keeps_the_engine_to_a_line(tmp_path: Path) -> None:
    db = tmp_path / "escrow.db"
    with Store.open(f"sqlite:///{db}") as store:
        recorder = Recorder(store)
        run_id = recorder.start_run(task="t", repo="/r", model="m", config={}, policy={})
        recorder.record_event(run_id, None, "engine", {"engine": "openai-compatible", "version": None,
                                                       "evidence": "no engine endpoint answered", "reachable": True,
                                                       "settings": {}})
        recorder.finish_run(run_id, "PASS", "the verifier passed", turn=0)
    url = ["--db", f"sqlite:///{db}"]
    clean = CliRunner().invoke(app, ["show", run_id, *url], env={"COLUMNS": "80"}).stdout
    assert "does not verify" not in clean
    engine = [line for line in clean.splitlines() if "engine" in line]
    assert engine == ["  engine:  openai-compatible (no engine endpoint answered)"], clean
    with sqlite3.connect(db) as conn:  # a verdict rewritten after the fact
        conn.execute("UPDATE events SET data_json = replace(data_json, 'verifier passed', 'verifier PASSED') "
                     "WHERE kind = 'verdict'")
    shown = CliRunner().invoke(app, ["show", run_id, *url], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    first = shown.stdout.splitlines()[0]
    assert first.startswith("warning: this run's hash chain does not verify"), shown.stdout


def test_show_names_a_batch_runs_batch_task_and_attempt(tmp_path: Path) -> None:
    from store.write import batches as bstore

    db = tmp_path / "escrow.db"
    with Store.open(f"sqlite:///{db}") as store:
        batch_id = bstore.create_batch(store, task_file="tasks.jsonl", tasks={"calc-mean": (1, {"id": "calc-mean"})},
                                       settings={})
        first = bstore.start_attempt(store, batch_id, "calc-mean")
        bstore.finish_attempt(store, first, outcome=bstore.INFRASTRUCTURE, run_id=None, verdict=None)
        second = bstore.start_attempt(store, batch_id, "calc-mean")
        recorder = Recorder(store)
        run_id = recorder.start_run(task="t", repo="/r", model="m", config={}, policy={})
        recorder.finish_run(run_id, "PASS", "the verifier passed", turn=0)
        bstore.finish_attempt(store, second, outcome=bstore.MODEL, run_id=run_id, verdict="PASS")
    shown = CliRunner().invoke(app, ["show", run_id, "--db", f"sqlite:///{db}"], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    assert f"  batch:   {batch_id[:12]}, task calc-mean, attempt 2" in shown.stdout.splitlines(), shown.stdout


def test_an_ambiguous_prefix_lists_its_matches(tmp_path: Path) -> None:
    """Issue 42, group 14: ``show 1`` said "ambiguous" without saying of what."""
    from collections import Counter

    db = tmp_path / "escrow.db"
    with Store.open(f"sqlite:///{db}") as store:
        recorder = Recorder(store)
        ids = [recorder.start_run(task="t", repo="/r", model="m", config={}, policy={}) for _ in range(17)]
    digit, _ = Counter(run_id[0] for run_id in ids).most_common(1)[0]  # 17 ids, 16 digits: one is shared
    shown = CliRunner().invoke(app, ["show", digit, "--db", f"sqlite:///{db}"])
    matches = [run_id for run_id in ids if run_id.startswith(digit)]
    assert len(matches) >= 2 and all(run_id[:12] in str(shown.exception) for run_id in matches[:5]), shown.exception


def test_a_patch_the_verifier_failed_does_not_read_not_verified(tmp_path: Path) -> None:
    """Issue 42, group 12: the verifier ran a submitted patch and failed it;
    show's patch heading said "not verified", as if it never ran."""
    import json

    from orchestrator.canonical import sha256_hex
    from orchestrator.contract import Message, ToolCall
    from orchestrator.envelope import Envelope, Payload, Status
    from store.write import synthetic

    db = tmp_path / "escrow.db"
    diff = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    sha = sha256_hex(diff.encode())
    submit = ToolCall(id="c0", name="submit", arguments="{}")
    with Store.open(f"sqlite:///{db}") as store:
        recorder = Recorder(store)
        run_id = recorder.start_run(task="t", repo="/r", model="m", config={}, policy={})
        with recorder.turn(run_id, 0) as tx:
            call_id = tx.request(synthetic.request_for(0, [Message(role="user", content="t")]))
            tx.envelope(call_id, Envelope(status=Status.COMPLETED, finish_reason="tool_calls", http_status=200,
                                          payload=Payload(text="", tool_calls=(submit,))))
            ran = tx.candidate(call_id, 0, submit)
            tx.transition(ran, None, "STAGED", "released from model escrow")
            tx.transition(ran, "STAGED", "COMMITTED", "policy", layer="policy")
            tx.tool_execution(ran, tool="submit", arguments_json="{}", decision="allow", rule="tools.submit",
                              reason="granted", exit_code=1, stdout="1 failed", stderr="", duration_s=0.2,
                              observation="1 failed", ok=False,
                              detail={"verifier_passed": False, "patch_sha256": sha, "patch_files": ["calc.py"]})
            tx.commit([Message(role="assistant", content="", tool_calls=(submit,))])
        recorder.record_event(run_id, None, "patch", {"sha256": sha, "files": ["calc.py"], "text": diff,
                                                       "skipped": [], "flagged": [], "verified": False})
        recorder.finish_run(run_id, "BUDGET_EXHAUSTED", "max turns", turn=1)
        other = recorder.start_run(task="t", repo="/r", model="m", config={}, policy={})
        recorder.record_event(other, None, "patch", {"sha256": sha, "files": ["calc.py"], "text": diff,
                                                      "skipped": [], "flagged": [], "verified": False})
        recorder.finish_run(other, "BUDGET_EXHAUSTED", "max turns", turn=0)
    url = ["--db", f"sqlite:///{db}"]

    def heading(run: str) -> str:
        out = CliRunner().invoke(app, ["show", run, *url], env={"COLUMNS": "80"}).stdout
        return next(line for line in out.splitlines() if line.startswith("patch sha256"))

    assert heading(run_id) == f"patch sha256 {sha[:16]}, 1 files, the verifier failed it", json.dumps(heading(run_id))
    assert heading(other).endswith(", not verified")  # never put to the verifier
