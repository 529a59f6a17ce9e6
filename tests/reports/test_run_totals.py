"""Schemas 8 and 9: per-run totals and the per-day TTFT rollup. A report read from the stored totals equals the
one read from the rows, for every grouping, window and spend rule, over
varied runs (forks, replays, re-executions, an import, retries, unanswered
calls, NULL cells, several models and engines, runs still running)."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from orchestrator.composition.launch.reports import report_runs
from orchestrator.contract import Message, ModelRequest, Sampling, ToolCall
from orchestrator.costing.figures import GROUP_BY
from orchestrator.envelope import Attempt, Envelope, Payload, Status, Timings, Usage
from policies.price_table import load_price_table, set_price
from store import Recorder, Store
from store.engine import driver_rows
from store.errors import StoreDamaged, TtftRollupMismatch, UncheckedRows
from store.read import run_totals, ttft_buckets, ttft_days
from store.read.reports import read_slices
from store.read.reports.query_plans import query_plans
from store.read.reports.ttft_histogram import whole_days
from store.text_codec import unescape
from store.write import totals_write
from store.write.importer import import_file
from store.write.retention import collect
from tests.interop.conftest import own

MODELS = ("gemma-3-270m", "qwen3-0.6b", "llama-3.2-1b")
ENGINES = (None, "llama.cpp", "vllm")
PRICE = {"input_per_mtok": 2.0, "cached_input_per_mtok": 0.5, "output_per_mtok": 10.0, "gpu_per_hour": 3.6}


def an_envelope(rng: random.Random, prompt: int, model: str) -> Envelope:
    retries = rng.choice((0, 0, 1, 2))
    attempts = [Attempt(number=i + 1, status=Status.TRANSPORT_FAILURE, http_status=503,
                        duration_s=rng.uniform(0.01, 0.2), backoff_s=rng.uniform(0, 0.5)) for i in range(retries)]
    total = rng.uniform(0.2, 4.0)
    attempts.append(Attempt(number=retries + 1, status=Status.COMPLETED, http_status=200, duration_s=total))
    return Envelope(
        status=Status.COMPLETED, payload=Payload(text="ok"), finish_reason="stop", http_status=200,
        usage=Usage(prompt_tokens=prompt, cached_prompt_tokens=rng.choice((0, prompt // 2, prompt + 7)),
                    completion_tokens=rng.randrange(1, 400), prompt_source="server", cached_source="server",
                    completion_source="server"),
        # TTFT grows with the prompt, as prefill does; sometimes the server gives none.
        timings=Timings(ttft_s=None if rng.random() < 0.1 else 0.02 + prompt * rng.uniform(2e-5, 3e-5),
                        decode_s=rng.choice((None, rng.uniform(0.1, 2.0))), total_s=total),
        model=model, engine=rng.choice(ENGINES), attempts=tuple(() if rng.random() < 0.15 else attempts),
    )


def a_run(recorder: Recorder, rng: random.Random, turns: int, *, finish: bool = True, **run: object) -> str:
    run_id = recorder.start_run(task="t", repo="/r", model=MODELS[0], config={}, policy={}, **run)  # type: ignore[arg-type]
    for turn in range(turns):
        model = rng.choice(MODELS)
        with recorder.turn(run_id, turn) as tx:
            request = ModelRequest(model=model, messages=(Message(role="user", content=f"turn {turn}"),),
                                   max_tokens=64, sampling=Sampling())
            call_id = tx.request(request)
            if rng.random() < 0.1:
                continue  # unanswered: a request and no response
            tx.envelope(call_id, an_envelope(rng, 500 + 1500 * turn, model))
            if rng.random() < 0.6:
                call = ToolCall(id=f"c{turn}", name="bash", arguments='{"cmd": "ls"}')
                candidate = tx.candidate(call_id, 0, call)
                tx.transition(candidate, None, "STAGED", "staged")
                tx.tool_execution(candidate, tool="bash", arguments_json=call.arguments, decision="allow",
                                  rule="tools", reason="granted", exit_code=0, stdout="ok\n", stderr="",
                                  duration_s=rng.choice((None, rng.uniform(0.01, 3.0))), observation="ok", ok=True)
    if finish:
        recorder.finish_run(run_id, rng.choice(("PASS", "FAIL")), turn=turns)
    return run_id


@pytest.fixture
def varied(store: Store, home: Path) -> Store:
    rng = random.Random(14)
    moment = [1_790_000_000.0]

    def clock() -> float:
        moment[0] += rng.uniform(100, 20_000)
        return moment[0]

    recorder = Recorder(store, clock=clock)
    parents = [a_run(recorder, rng, rng.randrange(1, 9)) for _ in range(10)]
    a_run(recorder, rng, 6, mode="fork", parent_run_id=parents[0], forked_at_turn=2)
    a_run(recorder, rng, 5, mode="fork", parent_run_id=parents[1], forked_at_turn=4, finish=False)
    a_run(recorder, rng, 4, mode="replay", parent_run_id=parents[2])
    a_run(recorder, rng, 4, mode="reexecute", parent_run_id=parents[3])
    a_run(recorder, rng, 3, finish=False)
    import_file(store, own("inspect/arith.eval"))
    # NULL usage and timings in a finished run (as an old or imported store may hold), totals rewritten after.
    with store.write() as conn:
        conn.exec_driver_sql('UPDATE model_responses SET "gen_ai.usage.input_tokens" = NULL, ttft_s = NULL, '
                             "decode_s = NULL WHERE run_id = ? AND turn = 0", (parents[4],))
        totals_write.write(conn, [parents[4]])
    for model in MODELS:
        set_price(home, model, PRICE)
    return store


# All time; from within a day; whole days (UTC) only; from and to within a day.
WINDOWS = ((None, None), (1_790_050_000.0, None), (1_790_035_200.0, 1_790_208_000.0),
           (1_790_050_000.0, 1_790_150_000.0))


def reports(store: Store, home: Path, raw: bool) -> list[dict[str, object]]:
    prices = load_price_table(home)
    out = []
    for by in GROUP_BY:
        for since, until in WINDOWS:
            for include_replays in (False, True):
                report = report_runs(store, by=by, since=since, until=until, prices=prices,
                                     include_replays=include_replays, raw=raw)
                out.append(report.model_dump())
    return out


def test_totals_and_rows_give_identical_reports(varied: Store, home: Path) -> None:
    with varied.read() as conn:
        n = conn.exec_driver_sql("SELECT count(DISTINCT run_id) FROM run_totals").scalar()
        finished = conn.exec_driver_sql("SELECT count(*) FROM runs WHERE status = 'finished'").scalar()
    assert n == finished and n > 10, "every finished run has its totals, and only those"
    from_totals, from_rows = reports(varied, home, raw=False), reports(varied, home, raw=True)
    assert from_totals == from_rows
    assert any(r["total"] and r["total"]["ttft_s"]["p95"] for r in from_totals)
    for by in GROUP_BY:
        for include_replays in (False, True):
            assert read_slices(varied, by=by, since=None, until=None, include_replays=include_replays) == read_slices(
                varied, by=by, since=None, until=None, include_replays=include_replays, raw=True)


def test_a_report_reads_the_totals_not_the_rows(varied: Store, home: Path) -> None:
    """A finished run's responses changed behind the store's back move the
    rows' figure only: the finished run's figure comes from its totals. A
    running run's (no totals: its rows are summed) stops the report, naming
    the run, as its chain no longer verifies (``UncheckedRows``)."""
    before = read_slices(varied, by="model", since=None, until=None)[0]
    running = {s.run_id for s in before if s.status == "running"}
    assert running
    marks = ", ".join("?" * len(running))
    with varied.write() as conn:
        conn.exec_driver_sql('UPDATE model_responses SET "gen_ai.usage.output_tokens" = '
                             f'"gen_ai.usage.output_tokens" + 1000000 WHERE run_id NOT IN ({marks})', tuple(running))
    assert read_slices(varied, by="model", since=None, until=None) != read_slices(
        varied, by="model", since=None, until=None, raw=True)
    assert read_slices(varied, by="model", since=None, until=None)[0] == before
    with varied.write() as conn:
        conn.exec_driver_sql('UPDATE model_responses SET "gen_ai.usage.output_tokens" = '
                             f'"gen_ai.usage.output_tokens" + 1000000 WHERE run_id IN ({marks})', tuple(running))
    with pytest.raises(UncheckedRows) as refused:
        read_slices(varied, by="model", since=None, until=None)
    assert set(refused.value.run_ids) == running


def totals_db(home: Path) -> Path:
    return home / "escrow.db"


def test_a_changed_total_fails_verify_naming_the_run(varied: Store, home: Path) -> None:
    with varied.read() as conn:
        run_id, row_id = conn.exec_driver_sql(
            "SELECT run_id, id FROM run_totals WHERE calls > 0 ORDER BY id LIMIT 1").one()
    assert varied.verify(run_id).ok and all(c.ok for c in varied.verify_all())
    with varied.read() as conn:
        ttft_id = conn.exec_driver_sql("SELECT id FROM run_ttfts WHERE run_id = ? LIMIT 1", (run_id,)).scalar()
    for table, key, column, value in (
        ("run_totals", row_id, "prompt_tokens", "prompt_tokens + 1"),
        ("run_totals", row_id, "http_s", "http_s * 1.000001"),
        ("run_totals", row_id, "calls", "calls - 1"), ("run_ttfts", ttft_id, "calls", "calls + 1"),
        ("run_ttfts", ttft_id, "bucket_ms", "bucket_ms + 1"), ("run_ttfts", ttft_id, "own", "1 - own"),
    ):
        with closing(sqlite3.connect(totals_db(home))) as conn:
            (old,) = conn.execute(f"SELECT {column} FROM {table} WHERE id = ?", (key,)).fetchone()
            conn.execute(f"UPDATE {table} SET {column} = {value} WHERE id = ?", (key,))
            conn.commit()
        check = varied.verify(run_id)
        assert not check.ok and check.table == "run_totals" and "run_totals" in (check.problem or ""), column
        assert [c.run_id for c in varied.verify_all() if not c.ok] == [run_id], column
        with closing(sqlite3.connect(totals_db(home))) as conn:
            conn.execute(f"UPDATE {table} SET {column} = ? WHERE id = ?", (old, key))
            conn.commit()
        assert varied.verify(run_id).ok


def test_a_changed_response_still_fails_verify(varied: Store, home: Path) -> None:
    with varied.read() as conn:
        run_id, row_id = conn.exec_driver_sql(
            "SELECT r.run_id, r.id FROM model_responses r JOIN runs ON runs.id = r.run_id "
            "WHERE runs.status = 'finished' ORDER BY r.id LIMIT 1").one()
    with closing(sqlite3.connect(totals_db(home))) as conn:
        conn.execute('UPDATE model_responses SET "gen_ai.usage.input_tokens" = 7 WHERE id = ?', (row_id,))
        conn.commit()
    check = varied.verify(run_id)
    assert not check.ok and check.table == "model_responses" and check.row_id == row_id


def test_a_damaged_total_stops_the_report_naming_it(varied: Store, home: Path) -> None:
    with closing(sqlite3.connect(totals_db(home))) as conn:
        (row_id,) = conn.execute("SELECT id FROM run_totals WHERE calls > 0 LIMIT 1").fetchone()
        conn.execute("UPDATE run_totals SET decode_s = 'abc' WHERE id = ?", (row_id,))
        conn.commit()
    with pytest.raises(StoreDamaged) as caught:
        read_slices(varied, by="model", since=None, until=None, include_replays=True)
    context = caught.value.context
    assert (context["table"], context["row_id"], context["column"]) == ("run_totals", str(row_id), "decode_s")
    assert "run_totals" in caught.value.message and "'abc'" in caught.value.message


DAMAGED_RUN_CELLS = [
    # (table, column, SQL of the damaged value, the column the error names)
    ("runs", "created_at", "'yesterday'", "created_at"),
    ("runs", "status", "x'00ff'", "status"),
    ("runs", "verdict", "x'01'", "verdict"),
    ("runs", "config_json", "json_set(config_json, '$.import.format', 5)", "config_json"),
]


@pytest.mark.parametrize("raw", [False, True], ids=["from-totals", "from-rows"])
@pytest.mark.parametrize(("table", "column", "value", "named"), [
    *DAMAGED_RUN_CELLS, ("run_totals", "tool_s", "'abc'", "tool_s")])
def test_a_damaged_cell_a_slice_carries_stops_the_report_naming_it(
        varied: Store, home: Path, table: str, column: str, value: str, named: str, raw: bool) -> None:
    """Slices are built without validation: every run cell and figure they
    carry is checked as read, whether the run is read from its totals or its rows."""
    if table == "run_totals" and raw:
        table, column, value, named = "tool_executions", "duration_s", "'abc'", "duration_s"
    imported = column == "config_json"
    with closing(sqlite3.connect(totals_db(home))) as conn:
        (run_id,) = conn.execute(
            "SELECT t.run_id FROM run_totals t JOIN runs ON runs.id = t.run_id WHERE t.calls > 0 AND t.own = 1 "
            f"AND (runs.mode = 'import') = {int(imported)} AND runs.mode NOT IN ('replay', 'reexecute') "
            + ("AND EXISTS (SELECT 1 FROM tool_executions x WHERE x.run_id = runs.id) " if table == "tool_executions"
               else "") + "ORDER BY t.id LIMIT 1").fetchone()
        where = {"runs": "id = ?", "run_totals": "run_id = ? AND model IS NULL AND own = 1",
                 "tool_executions": "run_id = ?"}[table]
        conn.execute(f'UPDATE {table} SET "{column}" = {value} WHERE {where}', (run_id,))
        conn.commit()
    with pytest.raises(StoreDamaged) as caught:
        read_slices(varied, by="model", since=None, until=None, raw=raw)
    assert caught.value.context["column"] == named and table in caught.value.message
    if table == "runs":
        assert caught.value.context["row_id"] == run_id


def test_a_run_finished_with_a_damaged_cell_gets_no_totals_and_the_report_names_the_cell(store: Store) -> None:
    rng = random.Random(3)
    recorder = Recorder(store)
    run_id = a_run(recorder, rng, 3, finish=False)
    with store.write() as conn:
        row_id = conn.exec_driver_sql("SELECT id FROM model_responses WHERE run_id = ? LIMIT 1", (run_id,)).scalar()
        conn.exec_driver_sql("UPDATE model_responses SET total_s = 'abc' WHERE id = ?", (row_id,))
    recorder.finish_run(run_id, "PASS", turn=3)
    with store.read() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM run_totals WHERE run_id = ?", (run_id,)).scalar() == 0
    with pytest.raises(StoreDamaged) as caught:
        read_slices(store, by="model", since=None, until=None)
    context = caught.value.context
    assert (context["table"], context["row_id"], context["column"]) == ("model_responses", row_id, "total_s")


def test_gc_deletes_a_runs_totals_with_it(varied: Store) -> None:
    with varied.read() as conn:
        before = conn.exec_driver_sql("SELECT count(*) FROM run_totals").scalar()
        ttfts = conn.exec_driver_sql("SELECT count(*) FROM run_ttfts").scalar()
        cut = conn.exec_driver_sql("SELECT created_at FROM runs ORDER BY created_at LIMIT 1 OFFSET 8").scalar()
    with varied.write() as conn:
        result = collect(conn, before=cut)
    assert result.runs_deleted > 0
    with varied.read() as conn:
        left = conn.exec_driver_sql("SELECT count(*) FROM run_totals").scalar()
        orphans = conn.exec_driver_sql(
            "SELECT count(*) FROM run_totals WHERE run_id NOT IN (SELECT id FROM runs)").scalar()
        ttfts_left = conn.exec_driver_sql("SELECT count(*) FROM run_ttfts").scalar()
        ttft_orphans = conn.exec_driver_sql(
            "SELECT count(*) FROM run_ttfts WHERE run_id NOT IN (SELECT id FROM runs)").scalar()
    assert before > 0 and left < before and orphans == 0
    assert ttfts > 0 and ttfts_left < ttfts and ttft_orphans == 0
    assert all(c.ok for c in varied.verify_all())


def test_the_ttft_histogram_does_not_grow_with_calls() -> None:
    """A thousand TTFTs between 0.2 s and 3 s (as prefill grows over a run)
    fall in at most the buckets of that range: 16 an octave."""
    ttfts = [round(200 + i * 2.8) for i in range(1000)]
    buckets = {ttft_buckets.ttft_bucket(ms) for ms in ttfts}
    assert len(buckets) <= 16 * 4 + 1
    for ms in ttfts:
        assert abs(ttft_buckets.bucket_seconds(ttft_buckets.ttft_bucket(ms)) * 1000 - ms) <= ms / 32
    assert [ttft_buckets.ttft_bucket(ms) for ms in range(32)] == list(range(32))


def test_a_summed_row_recorded_after_the_finish_updates_the_totals(store: Store) -> None:
    recorder = Recorder(store)
    run_id = a_run(recorder, random.Random(5), 2)
    with recorder.turn(run_id, 2) as tx:
        request = ModelRequest(model=MODELS[1], messages=(Message(role="user", content="late"),), max_tokens=8,
                               sampling=Sampling())
        tx.envelope(tx.request(request), an_envelope(random.Random(6), 4000, MODELS[1]))
    assert store.verify(run_id).ok
    assert read_slices(store, by="model", since=None, until=None) == read_slices(
        store, by="model", since=None, until=None, raw=True)


# Schema 9: the per-day TTFT rollup. A report over whole days reads it, so it must stay the sum of
# the runs' stored buckets through every write, rewrite and deletion.


def rollup(store: Store) -> list[tuple[object, ...]]:
    with store.read() as conn:
        return sorted((tuple(r) for r in conn.exec_driver_sql(
            "SELECT day, replay, own, model, engine, bucket_ms, sum(calls) FROM ttft_days "
            "GROUP BY day, replay, own, model, engine, bucket_ms HAVING sum(calls) != 0")), key=repr)


def rebuilt(store: Store) -> list[tuple[object, ...]]:
    with store.read() as conn:
        want, _ = ttft_days.sums(conn, ttft_days.true())
    return sorted(((*k, n) for k, n in want.items()), key=repr)


def test_the_rollup_is_the_sum_of_the_runs_buckets(varied: Store) -> None:
    """Written run by run as runs finish (and once rewritten, for a run whose
    rows changed): the same as summing every run's buckets afresh."""
    assert rollup(varied) == rebuilt(varied) and len(rollup(varied)) > 10
    with varied.read() as conn:
        days = conn.exec_driver_sql("SELECT count(DISTINCT day), sum(replay) FROM ttft_days").one()
        zeros = conn.exec_driver_sql("SELECT count(*) FROM ttft_days WHERE calls = 0").scalar()
    assert days[0] > 1 and days[1] > 0 and zeros == 0, "several days, replays flagged, no empty rows"
    with varied.read() as conn:
        assert ttft_days.problems(conn) == {}


def test_whole_days_of_a_window() -> None:
    day = ttft_days.DAY_S
    assert whole_days(None, None) == (None, None)
    assert whole_days(10 * day, 12 * day) == (10, 12)
    assert whole_days(10 * day + 1, 12 * day - 1) is None
    assert whole_days(10 * day + 1, 11 * day + 5) is None
    assert whole_days(10 * day - 0.5, None) == (10, None)
    for created in (0.0, day - 1e-9, day * 1.0, 20717.5 * day, 20718 * day - 1e-6):
        d = ttft_days.day_of(created)
        assert d * day <= created < (d + 1) * day


def test_a_report_over_whole_days_reads_the_rollup(varied: Store, home: Path) -> None:
    """A rollup row changed behind the store's back stops the report from
    totals, naming the group (its figures would have moved, schema 10 and
    before), and verify names that row."""
    with varied.read() as conn:
        row_id, day = conn.exec_driver_sql(
            "SELECT id, day FROM ttft_days WHERE own = 1 AND replay = 0 ORDER BY calls DESC LIMIT 1").one()
        key = tuple(conn.exec_driver_sql(
            "SELECT day, replay, own, model, engine, bucket_ms FROM ttft_days WHERE id = ?", (row_id,)).one())
        run_id = sorted(ttft_days.sums(conn, ttft_days.true())[1][key])[0]  # a run that sums the row's key
    assert run_id and all(c.ok for c in varied.verify_all())
    before = read_slices(varied, by="model", since=None, until=None)
    assert before == read_slices(varied, by="model", since=None, until=None, raw=True)
    with varied.read() as conn:
        model = conn.exec_driver_sql("SELECT model FROM ttft_days WHERE id = ?", (row_id,)).scalar()
    with closing(sqlite3.connect(totals_db(home))) as conn:
        conn.execute("UPDATE ttft_days SET calls = calls + 100000 WHERE id = ?", (row_id,))
        conn.commit()
    with pytest.raises(TtftRollupMismatch) as stopped:
        read_slices(varied, by="model", since=None, until=None)
    assert stopped.value.groups == [model]
    # The report from the rows alone still reads: it sums no rollup.
    assert read_slices(varied, by="model", since=None, until=None, raw=True) == before
    check = varied.verify(run_id)
    assert not check.ok and check.table == "ttft_days" and check.row_id == str(row_id), check
    assert "holds" in (check.problem or "") and "add up to" in (check.problem or "")
    failed = [c for c in varied.verify_all() if not c.ok]
    assert failed and all(c.table == "ttft_days" and c.row_id == str(row_id) for c in failed)
    with closing(sqlite3.connect(totals_db(home))) as conn:
        conn.execute("UPDATE ttft_days SET calls = calls - 100000 WHERE id = ?", (row_id,))
        conn.execute("INSERT INTO ttft_days (day, replay, own, model, engine, bucket_ms, calls) "
                     "VALUES (?, 0, 1, 'forged', NULL, 5, 3)", (day,))
        conn.commit()
    failed = [c for c in varied.verify_all() if not c.ok]
    assert failed and all(c.table == "ttft_days" and "'forged'" in (c.problem or "") for c in failed)
    with pytest.raises(TtftRollupMismatch) as stopped:
        read_slices(varied, by="model", since=None, until=None)
    assert stopped.value.groups == ["forged"]


def test_gc_takes_the_deleted_runs_out_of_the_rollup(varied: Store, home: Path) -> None:
    with varied.read() as conn:
        cut = conn.exec_driver_sql("SELECT created_at FROM runs ORDER BY created_at LIMIT 1 OFFSET 8").scalar()
        first_day = conn.exec_driver_sql("SELECT min(day) FROM ttft_days").scalar()
    before = rollup(varied)
    with varied.write() as conn:
        assert collect(conn, before=cut).runs_deleted > 0
    assert rollup(varied) == rebuilt(varied) and rollup(varied) != before
    with varied.read() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM ttft_days WHERE calls = 0").scalar() == 0
        assert conn.exec_driver_sql("SELECT min(day) FROM ttft_days").scalar() >= first_day
    assert all(c.ok for c in varied.verify_all())
    assert reports(varied, home, raw=False) == reports(varied, home, raw=True)


def test_an_all_time_report_reads_no_runs_buckets(varied: Store) -> None:
    plans = query_plans(varied, None, None)
    assert "ttft days" in plans and "ttft stored" not in plans
    assert all("run_ttfts" not in step and "runs" not in step for step in plans["ttft days"]), plans
    edges = query_plans(varied, 1_790_050_000.0, None)
    assert "ttft days" in edges and "ttft stored" in edges


@pytest.mark.parametrize("by", ["model", "engine"])
@pytest.mark.parametrize("finish", [True, False], ids=["from-totals", "from-rows"])
def test_a_nul_escaped_model_or_engine_keeps_its_ttfts_in_its_group(store: Store, by: str, finish: bool) -> None:
    """Model and engine names are stored escaped (U+0000, docs/SCHEMA.md): the
    TTFT histogram's keys must come back unescaped, as the slices' do, or the
    group loses its TTFT figures."""
    model, engine = "gem\x00ma", "llama\x00cpp"
    recorder = Recorder(store)
    run_id = recorder.start_run(task="t", repo="/r", model=model, config={}, policy={})
    for turn in range(3):
        with recorder.turn(run_id, turn) as tx:
            call_id = tx.request(ModelRequest(model=model, messages=(Message(role="user", content=f"t{turn}"),),
                                              max_tokens=64, sampling=Sampling()))
            tx.envelope(call_id, Envelope(
                status=Status.COMPLETED, payload=Payload(text="ok"), finish_reason="stop", http_status=200,
                usage=Usage(prompt_tokens=100, completion_tokens=5), model=model, engine=engine,
                timings=Timings(ttft_s=0.25 + turn / 10, total_s=1.0)))
    if finish:
        recorder.finish_run(run_id, "PASS", turn=3)
    pieces, ttfts = read_slices(store, by=by, since=None, until=None)
    assert {model if by == "model" else engine} == {p.model if by == "model" else p.engine for p in pieces}
    assert {key for key, _, _ in ttfts} == {model if by == "model" else engine}
    report = report_runs(store, by=by, since=None, until=None, prices=load_price_table(None))
    (group,) = report.groups
    assert group.ttft_s.p50 is not None and group.ttft_s.p50 == pytest.approx(0.35, rel=1 / 32)
    # The driver's rows: a parameter compared with an escaped column is
    # escaped as SQLAlchemy escapes it; the cells come back as stored.
    with store.read() as conn:
        ((found, stored),) = driver_rows(conn, select(run_totals.RESPONSES.c.run_id, run_totals.RESPONSES.c.engine)
                                         .where(run_totals.RESPONSES.c.engine == engine).limit(1))
    assert found == run_id and stored != engine and unescape(stored) == engine


def _day_runs(conn: Any, day: int) -> set[str]:
    return set(conn.exec_driver_sql("SELECT id FROM runs WHERE created_at >= ? AND created_at < ? AND id IN "
                                    "(SELECT run_id FROM run_totals)",
                                    (day * ttft_days.DAY_S, (day + 1) * ttft_days.DAY_S)).scalars())


def test_verify_of_one_run_charges_it_only_the_rollup_keys_it_sums(varied: Store, home: Path) -> None:
    """``verify RUN`` answers as ``verify --all`` does for that run: a changed
    rollup row fails the runs that sum its key and no other run of its day;
    a row whose difference another run's changed TTFT rows explain is that
    run's; a key no run sums fails every run of its day. Before, ``verify RUN``
    charged the run with every difference of its day."""
    with varied.read() as conn:
        rows, whose = ttft_days.sums(conn, ttft_days.true())
        # A day where some run does not sum the key of the row to change.
        key = next(k for k in sorted(whose, key=repr) if k[1] == 0 and _day_runs(conn, k[0]) - whose[k])
        summing, day_runs = whose[key], _day_runs(conn, key[0])
        row_id = conn.exec_driver_sql(
            "SELECT min(id) FROM ttft_days WHERE day = ? AND replay = ? AND own = ? AND model IS ? AND engine IS ? "
            "AND bucket_ms = ?", key).scalar()
    others = day_runs - summing
    assert row_id and others and all(c.ok for c in varied.verify_all())

    def failed_alone(runs: set[str]) -> set[str]:
        return {r for r in runs if not varied.verify(r).ok}

    with closing(sqlite3.connect(totals_db(home))) as conn:
        conn.execute("UPDATE ttft_days SET calls = calls + 7 WHERE id = ?", (row_id,))
        conn.commit()
    every = {c.run_id for c in varied.verify_all() if not c.ok}
    assert every == summing and failed_alone(day_runs) == summing  # not the day's other runs
    assert all(varied.verify(r).row_id == str(row_id) for r in summing)
    with closing(sqlite3.connect(totals_db(home))) as conn:
        conn.execute("UPDATE ttft_days SET calls = calls - 7 WHERE id = ?", (row_id,))
        # One summing run's own TTFT row changed: the rollup now differs from the rows, and that run explains it.
        changed = sorted(summing)[0]
        conn.execute("UPDATE run_ttfts SET calls = calls + 1 WHERE rowid = (SELECT min(rowid) FROM run_ttfts "
                     "WHERE run_id = ? AND own = ? AND model IS ? AND engine IS ? AND bucket_ms = ?)",
                     (changed, key[2], key[3], key[4], key[5]))
        conn.commit()
    every = {c.run_id: c for c in varied.verify_all() if not c.ok}
    assert set(every) == {changed} and every[changed].table == "run_totals"
    assert failed_alone(day_runs) == {changed} and varied.verify(changed).table == "run_totals"
    with closing(sqlite3.connect(totals_db(home))) as conn:
        conn.execute("UPDATE run_ttfts SET calls = calls - 1 WHERE rowid = (SELECT min(rowid) FROM run_ttfts "
                     "WHERE run_id = ? AND own = ? AND model IS ? AND engine IS ? AND bucket_ms = ?)",
                     (changed, key[2], key[3], key[4], key[5]))
        conn.execute("INSERT INTO ttft_days (day, replay, own, model, engine, bucket_ms, calls) "
                     "VALUES (?, 0, 1, 'forged', NULL, 5, 3)", (key[0],))
        conn.commit()
    assert {c.run_id for c in varied.verify_all() if not c.ok} == day_runs == failed_alone(day_runs)
