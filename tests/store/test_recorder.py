"""Recording through the public API and reading it back."""

from __future__ import annotations

import random
import sqlite3

import pytest

from orchestrator.candidate import CandidateState, stage
from orchestrator.contract import Captured, Message, ToolCall
from orchestrator.envelope import Envelope, Status
from orchestrator.ports import ToolOutcome
from store import Recorder, RecordingError, RunJournal, Store
from store.write import synthetic
from store.write.teacher_scores import CallScore


def raw_count(path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]


def test_round_trip_keeps_every_recorded_field(recorded):
    store, run_id = recorded
    trajectory = store.trajectory(run_id[:8])
    assert trajectory.run.id == run_id and trajectory.run.verdict == "PASS" and trajectory.run.status == "finished"
    assert [t.turn for t in trajectory.turns] == [0, 1, 2, 3]  # 3 is the turn the verdict was given at
    first = trajectory.turns[0]
    call = first.calls[0]
    request = call.request()
    assert request.sha256() == call.request_sha256 and request.canonical() == call.request_json
    envelope = call.response.envelope()
    assert envelope.status is Status.COMPLETED and envelope.usage.prompt_tokens == call.response.input_tokens == 900
    assert len(call.attempts) == call.response.n_attempts == len(envelope.attempts)
    assert all(c.state in ("COMMITTED", "REJECTED") for c in first.candidates)
    assert [t.to_state for t in first.candidates[0].transitions][:2] == ["STAGED", "VALIDATING"]
    assert len(first.tool_executions) == len(first.candidates)
    assert first.committed is not None and first.committed.messages()[0].role == "assistant"
    assert store.verify(run_id).ok


def test_request_before_the_call_envelope_after_it_and_turn_rows_only_at_commit(store, db_path):
    recorder = Recorder(store)
    run_id = synthetic.start(recorder, random.Random(3))
    with recorder.turn(run_id, 0) as tx:
        call_id = tx.request(synthetic.request_for(0, []))
        # Another connection sees the request now: it was committed write-ahead.
        assert raw_count(db_path, "model_calls") == 1
        assert raw_count(db_path, "model_responses") == 0
        tx.envelope(call_id, Envelope(status=Status.COMPLETED))
        # ...and the envelope as soon as the call returned.
        assert raw_count(db_path, "model_responses") == 1
        tx.event("route", {"status": "COMPLETED"})
        # Only start_run's genesis event so far.
        assert raw_count(db_path, "events") == 1 and raw_count(db_path, "turns") == 0
    assert raw_count(db_path, "events") == 2 and raw_count(db_path, "turns") == 1
    assert store.verify(run_id).ok


def test_an_exception_inside_a_turn_discards_its_actions_like_a_crash(store):
    recorder = Recorder(store)
    run_id = synthetic.start(recorder, random.Random(4))
    with pytest.raises(ZeroDivisionError):
        with recorder.turn(run_id, 0) as tx:
            call_id = tx.request(synthetic.request_for(0, []))
            tx.envelope(call_id, Envelope(status=Status.COMPLETED))
            tx.event("route", {"status": "COMPLETED"})
            raise ZeroDivisionError("a failure inside the turn")
    record = store.trajectory(run_id).turns[0]
    # The call and its envelope were committed as they happened; the turn's actions were not.
    assert record.committed is None and record.calls[0].response is not None
    assert not record.events
    assert store.verify(run_id).ok


def test_observation_is_stored_byte_exact_and_output_is_capped_with_its_true_size(store):
    recorder = Recorder(store, output_cap_bytes=10)
    run_id = synthetic.start(recorder, random.Random(5))
    observation = "line\r\nünïcödé\t\x00end\n"
    with recorder.turn(run_id, 0) as tx:
        call_id = tx.request(synthetic.request_for(0, []))
        cand = tx.candidate(call_id, 0, ToolCall(id="c", name="bash", arguments='{"cmd":"ls"}'))
        tx.transition(cand, None, "STAGED", "staged")
        tx.transition(cand, "STAGED", "VALIDATING", "")
        tx.transition(cand, "VALIDATING", "COMMITTED", "")
        tx.tool_execution(
            cand,
            tool="bash",
            arguments_json={"cmd": "ls"},
            decision="allow",
            rule="tools.bash",
            reason="ok",
            exit_code=0,
            stdout="x" * 1000,
            stderr=b"\xff\xfe",
            duration_s=0.5,
            observation=observation,
        )
    (run,) = store.tool_executions(run_id)
    assert run.observation == observation
    assert run.stdout == "x" * 10 and run.stdout_bytes == 1000 and run.stdout_truncated
    assert run.stderr_bytes == 2 and not run.stderr_truncated
    assert run.arguments_json == '{"cmd":"ls"}'
    assert store.candidates(run_id)[0].tool_name == "bash"


def test_illegal_or_discontinuous_records_are_refused(store):
    recorder = Recorder(store)
    run_id = synthetic.record_run(recorder, turns=1, finish=False)
    with pytest.raises(RecordingError, match="is STAGED, not VALIDATING"):
        with recorder.turn(run_id, 1) as tx:
            call_id = tx.request(synthetic.request_for(1, []))
            cand = tx.candidate(call_id, 0, ToolCall(id="c", name="bash", arguments="{}"))
            tx.transition(cand, None, "STAGED")
            tx.transition(cand, "VALIDATING", "COMMITTED")
    with pytest.raises(RecordingError, match="did not make call nope"):
        with recorder.turn(run_id, 2) as tx:
            tx.envelope("nope", Envelope(status=Status.COMPLETED))
    with pytest.raises(RecordingError, match="finish_run"):
        recorder.record_event(run_id, 0, "verdict", {})
    with pytest.raises(RecordingError):  # turn 0 was already committed
        with recorder.turn(run_id, 0) as tx:
            tx.event("again", {})
    other = synthetic.record_run(recorder, turns=1, seed=9, finish=False)
    with pytest.raises(RecordingError, match="did not make"):
        with recorder.turn(run_id, 1) as tx:
            tx.envelope(store.calls(other)[0].id, Envelope(status=Status.COMPLETED))
    assert store.verify(run_id).ok and store.verify(other).ok


def test_a_turn_an_event_outside_it_and_the_verdict_extend_the_same_chain(store):
    recorder = Recorder(store)
    run_id = synthetic.start(recorder, random.Random(6))
    with recorder.turn(run_id, 0) as tx:
        call_id = tx.request(synthetic.request_for(0, []))
        tx.envelope(call_id, Envelope(status=Status.TRUNCATED, finish_reason="length"), cost_usd=0.5)
        cand = tx.candidate(call_id, 0, '{"name": "bash", "arguments": "{}"}')
        tx.transition(cand, None, CandidateState.STAGED, "staged")
        tx.transition(cand, CandidateState.STAGED, CandidateState.VALIDATING, "")
        tx.tool_execution(cand, tool="bash", arguments_json=None, decision="deny", rule="paths", reason="no",
                          exit_code=None, stdout="", stderr="", duration_s=None, observation="denied")
    recorder.record_event(run_id, None, "budget", {"left": 3})
    recorder.finish_run(run_id, "TRUNCATED", "cut off")
    check = store.verify(run_id)
    assert check.ok and check.rows == 10  # the genesis event, then nine (the turn row among them)
    assert store.calls(run_id)[0].response.finish_reasons == '["length"]'
    assert store.events(run_id, "budget")[0].data == {"left": 3}


def score(run_id: str, call_id: str, turn: int | None) -> CallScore:
    return CallScore(run_id=run_id, call_id=call_id, turn=turn, teacher_model="teacher", teacher_engine="vllm",
                     top_k=1, request_sha256=call_id.ljust(64, "0"), logprobs=(-0.5, float("-inf")),
                     in_top_k=(True, None), duration_s=0.25)


def test_teacher_scores_of_several_runs_are_one_commit(store):
    recorder = Recorder(store)
    a = synthetic.record_run(recorder, turns=2, seed=21)
    b = synthetic.record_run(recorder, turns=1, seed=22)
    scores = [score(run_id, call_id, turn)
              for run_id in (a, b) for call_id, turn, _ in store.answered_envelopes(run_id)]
    store.record_teacher_scores(scores)
    assert [r["call_id"] for r in store.teacher_scores(a)] == [s.call_id for s in scores if s.run_id == a]
    (row,) = store.teacher_scores(b)
    assert row["logprobs"] == [-0.5, None] and row["in_top_k"] == [True, None] and row["n_tokens"] == 2
    assert store.verify(a).ok and store.verify(b).ok


def test_a_teacher_score_naming_a_call_of_another_run_or_turn_is_refused_and_nothing_is_written(store):
    recorder = Recorder(store)
    a = synthetic.record_run(recorder, turns=2, seed=23)
    b = synthetic.record_run(recorder, turns=1, seed=24)
    (first, turn, _), (second, _, _) = store.answered_envelopes(a)[:2]
    other_call = store.answered_envelopes(b)[0][0]
    good = score(a, first, turn)
    for wrong in (score(a, other_call, 0), score(a, second, turn)):  # b's call; a's call of its next turn
        with pytest.raises(RecordingError, match="did not make"):
            store.record_teacher_scores([good, wrong])
    assert store.teacher_scores(a) == [] and store.teacher_scores(b) == []
    assert store.verify(a).ok and store.verify(b).ok


class Decision:
    effect, rule, reason = "allow", "tools.bash", "granted"


def test_run_journal_records_what_the_loop_reports(store):
    recorder = Recorder(store)
    run_id = synthetic.start(recorder, random.Random(7))
    journal = RunJournal(recorder, run_id)
    journal.event(0, "compaction", {"dropped": 2})
    ref = journal.request(0, synthetic.request_for(0, []))
    journal.envelope(0, ref, Envelope(status=Status.COMPLETED), 0.01)
    call = ToolCall(id="t1", name="bash", arguments='{"cmd": "ls"}')
    cand_ref = journal.candidate(0, ref, 0, call)
    candidate, staged = stage(0, call)
    journal.transition(cand_ref, staged)
    candidate, validating = candidate.to(CandidateState.VALIDATING)
    journal.transition(cand_ref, validating)
    candidate, committed = candidate.to(CandidateState.COMMITTED, layer="policy")
    journal.transition(cand_ref, committed)
    stdout = Captured(head="a" * 5, tail="z", total_bytes=5000, sha256="0" * 64, truncated=True)
    journal.tool(
        cand_ref,
        "bash",
        None,
        Decision(),
        ToolOutcome(observation="obs", ok=True, exit_code=0, stdout=stdout, timed_out=False, other={"cwd": "/w"}),
    )
    journal.event(0, "route", {"status": "COMPLETED"})
    journal.end_turn(0, (Message(role="assistant", content="hi"),))
    journal.event(1, "verdict", {"verdict": "PASS", "detail": "ok"})
    trajectory = store.trajectory(run_id)
    turn = trajectory.turns[0]
    assert [e.kind for e in turn.events] == ["compaction", "route"]
    (execution,) = turn.tool_executions
    assert (execution.decision, execution.rule, execution.stdout_bytes, execution.detail_json) == (
        "allow",
        "tools.bash",
        5000,
        '{"cwd":"/w","timed_out":false}',
    )
    # A cut stream is stored as it reads live: the omitted bytes counted.
    assert execution.stdout == stdout.text() == "aaaaa\n[... 4994 bytes omitted of 5000 ...]\nz"
    assert turn.candidates[0].transitions[-1].layer == "policy"
    assert trajectory.run.verdict == "PASS" and store.verify(run_id).ok


def test_runs_filters_and_totals(store):
    recorder = Recorder(store)
    a = synthetic.record_run(recorder, turns=2, seed=1, model="m-a")
    b = synthetic.record_run(recorder, turns=1, seed=2, model="m-b", finish=False)
    assert [s.run.id for s in store.runs()] == [b, a]
    assert [s.run.id for s in store.runs(model="m-a")] == [a]
    assert [s.run.id for s in store.runs(status="running")] == [b]
    assert [s.run.id for s in store.runs(verdict="PASS")] == [a]
    assert store.runs(since=store.run(b).created_at + 1) == []
    assert len(store.runs(limit=1)) == 1
    totals = store.runs(model="m-a")[0].totals
    calls = store.calls(a)
    assert totals.turns == 2 and totals.calls == 2
    assert totals.input_tokens == sum(c.response.input_tokens for c in calls)


def test_read_only_store_refuses_writes(recorded, db_path):
    with Store.open(f"sqlite:///{db_path}", readonly=True) as ro:
        assert ro.runs()
        with pytest.raises(Exception, match="read-only"):
            Recorder(ro).start_run(task="t", repo="r", config={}, policy={}, model="m")
