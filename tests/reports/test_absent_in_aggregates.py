"""Issue 42, group 1: an aggregate counts no absent figure as 0. A group's
hit rate is over the calls that reported a cached count, not over every
prompt token (a hit of 60% from a group whose calls mostly sent none); and a
group none of whose runs has dollars (an imported run whose source recorded
none) shows its dollars absent, not $0.0000."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from orchestrator.costing.aggregate import aggregate
from orchestrator.costing.figures import RunSlice
from tests.interop.conftest import real

T0 = 1_790_000_000.0


def piece(run: str, prompt: int, cached: int | None, calls: int = 1, reported: int | None = None,
          source: str = "escrow", source_usd: float | None = None) -> RunSlice:
    return RunSlice(run_id=run, created_at=T0, status="finished", verdict=None, model="m", calls=calls,
                    prompt_tokens=prompt, cached_tokens=cached, completion_tokens=1, gpu_s=0.0, decode_s=0.0,
                    retries=0, source=source, source_usd=source_usd, cached_reported=reported)


def test_the_hit_rate_is_over_the_calls_that_reported_a_cached_count() -> None:
    # One run whose 3 calls reported 750 cached of 1,000; nine whose calls sent no count.
    pieces = [piece("a", 1000, 750, calls=3, reported=3)] + [piece(f"b{i}", 1000, None) for i in range(9)]
    report = aggregate(pieces, [], by="model", prices=lambda _: None, price_version="v")
    group = report.groups[0]
    assert group.hit_ratio == 0.75  # not 750 / 10,000
    assert group.cached_tokens == 750 and group.cached_calls == 3 and group.calls == 12
    assert group.prefilled_tokens is None  # 9,000 prompt tokens of unknown split


def test_a_run_whose_calls_partly_reported_counts_none_of_its_prompt_in_the_hit_rate() -> None:
    # 2 of its 4 calls reported: which of its prompt tokens they cover is unknown.
    report = aggregate([piece("a", 1000, 500, calls=2, reported=2), piece("c", 4000, 100, calls=4, reported=2)],
                       [], by="model", prices=lambda _: None, price_version="v")
    group = report.groups[0]
    assert group.hit_ratio == 0.5  # not 600 / 5,000
    assert group.cached_tokens == 600 and group.cached_calls == 4  # the sum of those reported, as `report RUN` gives
    assert group.prefilled_tokens is None


def test_a_group_with_no_dollars_shows_its_dollars_absent() -> None:
    pieces = [piece("i1", 100, None, source="inspect"), piece("i2", 100, None, source="inspect"),
              piece("s1", 100, None, source="swe-agent", source_usd=0.25)]
    report = aggregate(pieces, [], by="source", prices=lambda _: None, price_version="v")
    by = {g.key: g for g in report.groups}
    assert by["inspect"].cost_usd is None and by["inspect"].cost_per_run.p50 is None
    assert by["swe-agent"].cost_usd == 0.25
    assert report.total is not None and report.total.cost_usd == 0.25 and report.total.priced_runs == 1


def test_report_by_source_and_by_model_on_real_imports(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ESCROW_HOME", str(tmp_path))
    monkeypatch.delenv("ESCROW_DB_URL", raising=False)
    files = [real("inspect/custom.eval"), real("inspect/log_read_sample.eval"),
             real("swe-agent/swe-agent__test-repo-i1.traj")]
    runner = CliRunner()
    assert runner.invoke(app, ["import", *map(str, files)]).exit_code == 0
    rows = {g["source"]: g for g in json.loads(runner.invoke(app, ["report", "--by", "source", "--json"]).stdout)
            ["groups"]}
    assert rows["inspect"]["cost_usd"] is None and rows["inspect"]["cost_per_run_p50"] is None
    assert rows["swe-agent"]["cost_usd"] > 0
    text = runner.invoke(app, ["report", "--by", "source"], env={"COLUMNS": "80"}).stdout
    lines = text.splitlines()
    head = next(n for n, line in enumerate(lines) if line.split()[:1] == ["source"])
    at = lines[head].split().index("$")  # a row a group (issue 42, group 7)
    dollars = [lines[n].split()[at] for n in range(head + 1, head + 4)]
    assert dollars == ["-", "0.5384", "0.5384"], text  # inspect, swe-agent, TOTAL
    assert "0.0000" not in text


def test_a_call_that_got_no_answer_costs_absent_not_zero(store, home: Path) -> None:
    """An HTTP 500 reports no usage: its turn's dollars for a priced model
    are absent (the server said nothing to price), not $0.0000."""
    from orchestrator.contract import Message, ModelRequest, Sampling
    from orchestrator.envelope import Attempt, Envelope, ErrorDetail, Status, Timings
    from policies.price_table import set_price
    from store import Recorder
    from tests.reports.test_absent_figures import NO_CACHE_COUNT

    set_price(home, "m", {"input_per_mtok": 3.0, "output_per_mtok": 15.0})
    failed = Envelope(status=Status.TRANSPORT_FAILURE, http_status=500, timings=Timings(total_s=0.1), model="m",
                      error=ErrorDetail(kind="http_5xx", message="HTTP 500"),
                      attempts=(Attempt(number=1, status=Status.TRANSPORT_FAILURE, http_status=500, duration_s=0.1),))
    recorder = Recorder(store)
    run_id = recorder.start_run(task="t", repo="/r", model="m", config={}, policy={})
    for turn, envelope in enumerate((NO_CACHE_COUNT, failed)):
        with recorder.turn(run_id, turn) as tx:
            request = ModelRequest(model="m", messages=(Message(role="user", content="t"),), max_tokens=64,
                                   sampling=Sampling(temperature=0.0))
            tx.envelope(tx.request(request), envelope)
            tx.commit([Message(role="assistant", content="x")])
    recorder.finish_run(run_id, "FAULTED", "HTTP 500", turn=2)
    got = CliRunner().invoke(app, ["report", run_id, "--json"])
    assert got.exit_code == 0, got.output
    turns = json.loads(got.stdout)["turns"]
    assert turns[0]["cost_usd"] > 0 and turns[1]["cost_usd"] is None
    text = CliRunner().invoke(app, ["report", run_id], env={"COLUMNS": "80"}).stdout
    failed_row = next(line for line in text.splitlines() if line.split()[:2] == ["1", "TRANSPORT_FAILURE"])
    assert "0.0000" not in failed_row and failed_row.split()[-2:] == ["-", "-"], text


def test_the_run_pages_chart_leaves_a_prompt_of_unknown_split_unsplit(store, home: Path, tmp_path: Path) -> None:
    """A turn whose server sent no cached count is drawn as prompt of unknown
    split, not as a prompt all prefilled."""
    from tests.reports.test_absent_figures import record_run

    run_id = record_run(store)
    page = tmp_path / "run.html"
    done = CliRunner().invoke(app, ["report", run_id, "--html", str(page)])
    assert done.exit_code == 0, done.output
    html = page.read_text(encoding="utf-8")
    chart = html[html.index("tokens-per-turn"):html.index("cost-per-turn")]
    assert "prompt, no cached count reported" in chart
