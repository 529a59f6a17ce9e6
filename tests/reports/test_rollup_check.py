"""Aggregates check what they read (schema 10): a stored totals row altered in
place, deleted, added, or left stale by a chain that moved on stops every
aggregate report with the damaged-store exit code, naming the runs, never
printing changed figures; `report RUN` stops the same way when the run's rows
and its stored totals disagree (a chained cell edited in place). Totals that
were kept in step (a row appended after the run finished) still report."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from orchestrator.composition.launch.reports import report_run, report_runs
from orchestrator.costing.figures import GROUP_BY
from orchestrator.exit_codes import ExitCode
from policies.price_table import load_price_table
from store import Recorder, Store
from store.errors import RollupMismatch, TtftRollupMismatch
from tests.reports.test_run_totals import varied as varied

FIGURE_EDITS = {
    "calls": "calls = calls + 1",
    "prompt_tokens": "prompt_tokens = prompt_tokens + 1000000",
    "cached_tokens": "cached_tokens = cached_tokens + 1",
    "cached_reported": "cached_reported = cached_reported + 1",
    "output_tokens": "output_tokens = output_tokens * 2 + 1",
    "direct_s": "direct_s = direct_s + 0.5",
    "http_s": "http_s = http_s + 1e-6",
    "wait_s": "wait_s = wait_s + 3",
    "decode_s": "decode_s = decode_s + 1",
    "retries": "retries = retries + 1",
    "ttft_check": "ttft_check = (ttft_check + 1) % 2147483647",
    "model": "model = 'qwen3-0.6b-renamed'",
    "engine": "engine = 'sglang'",
    "own": "own = 0",
}
MARKER_EDITS = {
    "tool_s": "tool_s = tool_s + 7",
    "tool_s down": "tool_s = tool_s / 2",
}


def finished_runs(store: Store) -> list[str]:
    with store.read() as conn:
        return [r[0] for r in conn.exec_driver_sql(
            "SELECT DISTINCT t.run_id FROM run_totals t JOIN runs r ON r.id = t.run_id "
            "WHERE t.model IS NOT NULL AND t.own = 1 AND r.mode NOT IN ('replay', 'reexecute') ORDER BY t.run_id")]


def sql(store: Store, statement: str, *params: object) -> int:
    with store.write() as conn:
        return conn.exec_driver_sql(statement, params).rowcount


def all_reports(store: Store, home: Path) -> None:
    prices = load_price_table(home)
    for by in GROUP_BY:
        for include_replays in (False, True):
            report_runs(store, by=by, since=None, until=None, prices=prices, include_replays=include_replays)


def assert_names(store: Store, home: Path, run_id: str) -> None:
    prices = load_price_table(home)
    for by in GROUP_BY:
        for include_replays in (False, True):
            with pytest.raises(RollupMismatch) as raised:
                report_runs(store, by=by, since=None, until=None, prices=prices, include_replays=include_replays)
            assert raised.value.run_ids == [run_id] and raised.value.exit_code == ExitCode.STORE_DAMAGED


def test_untouched_totals_report_and_the_check_reads_no_more_queries(varied: Store, home: Path) -> None:
    all_reports(varied, home)  # no false alarm on any grouping, with or without replays


@pytest.mark.parametrize("edit", list(FIGURE_EDITS))
def test_a_totals_row_altered_in_place_is_named(varied: Store, home: Path, edit: str) -> None:
    run_id = random.Random(edit).choice(finished_runs(varied))
    assert sql(varied, f"UPDATE run_totals SET {FIGURE_EDITS[edit]} WHERE id = (SELECT min(id) FROM run_totals "
                       "WHERE run_id = ? AND model IS NOT NULL AND own = 1)", run_id) == 1
    assert_names(varied, home, run_id)


@pytest.mark.parametrize("edit", list(MARKER_EDITS))
def test_a_runs_tool_seconds_row_altered_is_named(varied: Store, home: Path, edit: str) -> None:
    # A run whose tools took time: halving 0 seconds would change nothing to detect.
    with varied.read() as conn:
        timed = {r[0] for r in conn.exec_driver_sql(
            "SELECT run_id FROM run_totals WHERE model IS NULL AND own = 1 AND tool_s > 0")}
    run_id = random.Random(edit).choice([r for r in finished_runs(varied) if r in timed])
    assert sql(varied, f"UPDATE run_totals SET {MARKER_EDITS[edit]} WHERE run_id = ? AND model IS NULL AND own = 1",
               run_id) == 1
    assert_names(varied, home, run_id)


def test_a_cell_no_report_reads_changes_no_figure_and_verify_names_it(varied: Store, home: Path) -> None:
    """The tool seconds row's other figures are 0 by construction and never
    summed; the check hashes the 0s it assumes, so such an edit cannot move a
    figure. ``escrow verify`` still names it (it recomputes the totals)."""
    prices = load_price_table(home)
    before = report_runs(varied, by="model", since=None, until=None, prices=prices).model_dump()
    run_id = finished_runs(varied)[0]
    sql(varied, "UPDATE run_totals SET calls = calls + 1 WHERE run_id = ? AND model IS NULL AND own = 1", run_id)
    assert report_runs(varied, by="model", since=None, until=None, prices=prices).model_dump() == before
    check = varied.verify(run_id)
    assert not check.ok and check.table == "run_totals"


def test_a_totals_row_deleted_is_named(varied: Store, home: Path) -> None:
    with varied.read() as conn:
        run_id = conn.exec_driver_sql(
            "SELECT run_id FROM run_totals WHERE model IS NOT NULL AND own = 1 AND run_id IN "
            "(SELECT id FROM runs WHERE mode = 'run') GROUP BY run_id HAVING count(*) > 1 LIMIT 1").scalar()
    assert run_id is not None, "the fixture has a run with totals for two models"
    assert sql(varied, "DELETE FROM run_totals WHERE id = (SELECT max(id) FROM run_totals WHERE run_id = ? "
                       "AND model IS NOT NULL)", run_id) == 1
    assert_names(varied, home, run_id)


@pytest.mark.parametrize("edit", ["DELETE FROM run_totals", "UPDATE run_totals SET own = 0"])
def test_a_runs_last_model_row_deleted_or_reflagged_is_named(varied: Store, home: Path, edit: str) -> None:
    """The run then has no model row a report would fetch: its tool seconds
    row still comes back (an outer join), and its count of model rows names it."""
    with varied.read() as conn:
        run_id = conn.exec_driver_sql(
            "SELECT run_id FROM run_totals WHERE model IS NOT NULL AND own = 1 AND run_id IN "
            "(SELECT id FROM runs WHERE mode = 'run') GROUP BY run_id HAVING count(*) = 1 LIMIT 1").scalar()
    assert run_id is not None, "the fixture has a run with totals for one model"
    assert sql(varied, f"{edit} WHERE run_id = ? AND model IS NOT NULL", run_id) == 1
    assert_names(varied, home, run_id)


def test_a_totals_row_copied_onto_another_run_is_named(varied: Store, home: Path) -> None:
    source, target = finished_runs(varied)[:2]
    sql(varied, "INSERT INTO run_totals (run_id, own, model, engine, calls, prompt_tokens, cached_tokens, "
                "output_tokens, direct_s, http_s, wait_s, decode_s, retries, tool_s, digest) "
                "SELECT ?, own, model || '-copy', engine, calls, prompt_tokens, cached_tokens, output_tokens, "
                "direct_s, http_s, wait_s, decode_s, retries, tool_s, digest FROM run_totals "
                "WHERE run_id = ? AND model IS NOT NULL AND own = 1", target, source)
    assert_names(varied, home, target)


def test_totals_computed_before_the_chain_moved_on_are_named_stale(varied: Store, home: Path) -> None:
    run_id = finished_runs(varied)[0]
    sql(varied, "UPDATE runs SET chain_head = ? WHERE id = ?", "0" * 64, run_id)
    assert_names(varied, home, run_id)


def test_a_row_recorded_after_the_run_finished_keeps_the_totals_in_step(varied: Store, home: Path) -> None:
    run_id = finished_runs(varied)[0]
    with varied.read() as conn:
        head = conn.exec_driver_sql("SELECT chain_head FROM runs WHERE id = ?", (run_id,)).scalar()
    Recorder(varied).record_event(run_id, None, "note", {"after": "finish"})
    with varied.read() as conn:
        assert conn.exec_driver_sql("SELECT chain_head FROM runs WHERE id = ?", (run_id,)).scalar() != head
    all_reports(varied, home)


def test_report_run_stops_when_a_chained_cell_and_the_totals_disagree(varied: Store, home: Path) -> None:
    run_id = finished_runs(varied)[0]
    prices = load_price_table(home)
    report_run(varied, run_id, prices)
    sql(varied, 'UPDATE model_responses SET "gen_ai.usage.output_tokens" = "gen_ai.usage.output_tokens" + 5 '
                "WHERE id = (SELECT min(id) FROM model_responses WHERE run_id = ?)", run_id)
    with pytest.raises(RollupMismatch) as raised:
        report_run(varied, run_id, prices)
    assert raised.value.run_ids == [run_id] and "output_tokens" in str(raised.value)


def test_the_cli_names_the_runs_and_exits_with_the_damaged_store_code(varied: Store, home: Path) -> None:
    run_id = finished_runs(varied)[0]
    sql(varied, "UPDATE run_totals SET prompt_tokens = prompt_tokens + 1000000 WHERE run_id = ? "
                "AND model IS NOT NULL", run_id)
    env = {"ESCROW_HOME": str(home)}
    for args in (["report", "--json"], ["report", "--by", "day"], ["report", "--csv"], ["report", run_id, "--json"]):
        result = CliRunner().invoke(app, args, env=env)
        # cli.main.main turns the typed error into one line on stderr and its exit code.
        assert isinstance(result.exception, RollupMismatch), (args, result.output)
        assert result.exception.exit_code == ExitCode.STORE_DAMAGED
        assert run_id in str(result.exception) and "stale or altered" in str(result.exception)
        assert result.stdout == ""  # no figures printed


# The TTFT rollups (schema 11): edits of run_ttfts and ttft_days, each of which
# moves the TTFTs some report sums, and none of which touches run_totals.
# A run_ttfts row of a run on the partial first day of the second window, so
# that by model, engine or day a report reads it too (whole days read ttft_days).
EDGE_ROW = ("(SELECT min(t.id) FROM run_ttfts t JOIN runs r ON r.id = t.run_id WHERE t.own = 1 AND "
            "r.mode NOT IN ('replay', 'reexecute') AND r.created_at >= 1790050000 AND r.created_at < 1790121600)")
TTFT_EDITS = {
    "run_ttfts calls": f"UPDATE run_ttfts SET calls = calls + 3 WHERE id = {EDGE_ROW}",
    "run_ttfts bucket": f"UPDATE run_ttfts SET bucket_ms = bucket_ms * 4 WHERE id = {EDGE_ROW}",
    "run_ttfts model": f"UPDATE run_ttfts SET model = 'renamed' WHERE id = {EDGE_ROW}",
    "run_ttfts deleted": f"DELETE FROM run_ttfts WHERE id = {EDGE_ROW}",
    "run_ttfts added": "INSERT INTO run_ttfts (run_id, own, model, engine, bucket_ms, calls) SELECT run_id, own, "
                       f"model, engine, 7, 2 FROM run_ttfts WHERE id = {EDGE_ROW}",
    "ttft_days calls": "UPDATE ttft_days SET calls = calls + 1 WHERE id = (SELECT min(id) FROM ttft_days "
                       "WHERE own = 1 AND replay = 0)",
    "ttft_days bucket": "UPDATE ttft_days SET bucket_ms = bucket_ms + 1 WHERE id = (SELECT min(id) FROM ttft_days "
                        "WHERE own = 1 AND replay = 0 AND bucket_ms < 31)",
    "ttft_days day": "UPDATE ttft_days SET day = day + 1 WHERE id = (SELECT min(id) FROM ttft_days "
                     "WHERE own = 1 AND replay = 0)",
    "ttft_days model": "UPDATE ttft_days SET model = 'renamed' WHERE id = (SELECT min(id) FROM ttft_days "
                       "WHERE own = 1 AND replay = 0)",
    "ttft_days flag": "UPDATE ttft_days SET replay = 1 WHERE id = (SELECT min(id) FROM ttft_days "
                      "WHERE own = 1 AND replay = 0)",
    "ttft_days deleted": "DELETE FROM ttft_days WHERE id = (SELECT max(id) FROM ttft_days WHERE own = 1 "
                         "AND replay = 0)",
    "ttft_days added": "INSERT INTO ttft_days (day, replay, own, model, engine, bucket_ms, calls) SELECT day, 0, 1, "
                       "model, engine, 9, 1 FROM ttft_days WHERE id = (SELECT min(id) FROM ttft_days WHERE own = 1)",
}
# All time (whole days: the day rollup), and from within a day (the partial
# days read from run_ttfts too).
TTFT_WINDOWS = ((None, None), (1_790_050_000.0, None))


def every_report(store: Store, home: Path) -> dict[tuple[str, bool, float | None], object]:
    """Each aggregate report's JSON, or the error that stopped it."""
    prices, out = load_price_table(home), {}
    for by in GROUP_BY:
        for include_replays in (False, True):
            for since, until in TTFT_WINDOWS:
                try:
                    out[(by, include_replays, since)] = report_runs(
                        store, by=by, since=since, until=until, prices=prices, include_replays=include_replays)
                except TtftRollupMismatch as exc:
                    out[(by, include_replays, since)] = exc
    return out


@pytest.mark.parametrize("edit", list(TTFT_EDITS))
def test_a_ttft_rollup_altered_stops_every_report_it_would_move(varied: Store, home: Path, edit: str) -> None:
    """Every report either stops with the damaged-store code, naming the
    groups, or prints what it printed before the edit: never figures moved
    silently. And the edit is read somewhere: some report stops."""
    before = every_report(varied, home)
    assert not any(isinstance(v, Exception) for v in before.values())
    assert sql(varied, TTFT_EDITS[edit]) == 1
    after = every_report(varied, home)
    stopped = {k: v for k, v in after.items() if isinstance(v, TtftRollupMismatch)}
    assert stopped, "no report read the edited rollup"
    assert {k: v for k, v in after.items() if k not in stopped and v != before[k]} == {}
    for exc in stopped.values():
        assert exc.exit_code == ExitCode.STORE_DAMAGED and exc.groups
    assert not all(c.ok for c in varied.verify_all())  # verify recomputes the rollups from the rows


def test_the_cli_stops_on_a_ttft_rollup_altered(varied: Store, home: Path) -> None:
    sql(varied, TTFT_EDITS["ttft_days calls"])
    for args in (["report", "--json"], ["report", "--by", "day"], ["report", "--csv"]):
        result = CliRunner().invoke(app, args, env={"ESCROW_HOME": str(home)})
        # cli.main.main turns the typed error into one line on stderr and its exit code.
        assert isinstance(result.exception, TtftRollupMismatch), (args, result.output)
        assert result.exception.exit_code == ExitCode.STORE_DAMAGED
        assert "TTFT histograms" in str(result.exception)
        assert result.stdout == ""  # no figures printed
